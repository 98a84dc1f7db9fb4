// green-tests in TypeScript, written with the loopbox-policy SDK: run a check
// command; while it fails, hand the failure to the agent, up to `max_tries`
// times. `loopbox build` (and tests/build.rs) bundle it with esbuild first.
// World loop-policy. Input: {"check": ["make", "test"], "max_tries": 3}
import { ActionError, PolicyError, definePolicy, done, escalate, inject, log, state, type Decision } from '../sdk/index.js';
import { exec } from '../sdk/actions.js';

type Config = { check: string[]; max_tries: number };
type Progress = { config: Config; fixes: number };

const KEY = 'progress';
const EXPECTED = '{"check": ["make", "test"], "max_tries": 3}';

function parseConfig(text: string): Config {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (e) {
    throw new PolicyError(`green-tests-ts: bad input: ${(e as Error).message}; expected ${EXPECTED}`);
  }
  const { check = ['make', 'test'], max_tries = 3, ...rest } = (raw ?? {}) as Partial<Config>;
  const unknown = Object.keys(rest);
  if (unknown.length) throw new PolicyError(`green-tests-ts: bad input: unknown field \`${unknown[0]}\`; expected ${EXPECTED}`);
  if (!Array.isArray(check) || !check.length || !check.every((a) => typeof a === 'string')) {
    throw new PolicyError('green-tests-ts: bad input: `check` must be a list of strings');
  }
  if (!Number.isInteger(max_tries) || max_tries < 0) throw new PolicyError('green-tests-ts: bad input: `max_tries` must be a whole number');
  return { check, max_tries };
}

function check(progress: Progress): Decision {
  const argv = progress.config.check;
  const command = argv.join(' ');
  let out;
  try {
    out = exec(argv).timeoutMs(60_000).run();
  } catch (e) {
    // A refusal is an answer, not a crash: say what is missing and hand over.
    if (e instanceof ActionError) return escalate(`cannot run \`${command}\`: ${e.describe()}`);
    throw e;
  }
  if (out.exitCode === 0) {
    return done(true, `\`${command}\` passes after ${progress.fixes} fix(es)`, { fixes: progress.fixes, timed: out.durationMs >= 0 });
  }
  if (progress.fixes >= progress.config.max_tries) {
    return done(false, `\`${command}\` still fails after ${progress.fixes} fix(es)`, { fixes: progress.fixes });
  }
  progress.fixes += 1;
  log.info(`\`${command}\` fails; asking the agent for fix ${progress.fixes} of ${progress.config.max_tries}`);
  state.set(KEY, progress);
  const tail = (out.stdout + out.stderr).trimEnd().split('\n').slice(-30).join('\n');
  return inject(`\`${command}\` fails:\n${tail}\nFix the code so that it passes.`);
}

export const policy = definePolicy({
  name: 'green-tests-ts',
  description: 'Run a check; while it fails, hand the failure to the agent',

  onStart(input) {
    return check({ config: parseConfig(input), fixes: 0 });
  },

  onTurnComplete() {
    const progress = state.get<Progress>(KEY);
    if (progress === undefined) throw new PolicyError('green-tests-ts: a turn arrived before the run started');
    return check(progress);
  },
});

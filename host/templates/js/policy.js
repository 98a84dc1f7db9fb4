// {{name}}: a loopbox policy. It runs a check command; while the check fails, it
// hands the failure to the agent and checks again, up to `max_tries` times.
//
// Input (`loopbox run {{name}}.wasm --input '{...}'`):
//   {"check": ["make", "test"], "max_tries": 3}
//
// Written with the loopbox-policy SDK (vendored in loopbox-policy/, with its
// TypeScript declarations). Rename this file policy.ts to write TypeScript.
import { ActionError, PolicyError, definePolicy, done, escalate, inject, log, state } from './loopbox-policy/index.js';
import { exec } from './loopbox-policy/actions.js';

const EXPECTED = '{"check": ["make", "test"], "max_tries": 3}';

function parseConfig(text) {
  let raw;
  try {
    raw = JSON.parse(text);
  } catch (e) {
    throw new PolicyError(`{{name}}: bad input: ${e.message}; expected ${EXPECTED}`);
  }
  const { check = ['make', 'test'], max_tries = 3, ...rest } = raw ?? {};
  const unknown = Object.keys(rest);
  if (unknown.length) throw new PolicyError(`{{name}}: bad input: unknown field \`${unknown[0]}\`; expected ${EXPECTED}`);
  if (!Array.isArray(check) || !check.length || !check.every((a) => typeof a === 'string')) {
    throw new PolicyError('{{name}}: bad input: `check` must be a list of strings');
  }
  if (!Number.isInteger(max_tries) || max_tries < 0) throw new PolicyError('{{name}}: bad input: `max_tries` must be a whole number');
  return { check, max_tries };
}

function check(progress) {
  const argv = progress.config.check;
  const command = argv.join(' ');
  let out;
  try {
    out = exec(argv).run();
  } catch (e) {
    // A refusal is an answer, not a crash: say what is missing and hand over.
    if (e instanceof ActionError) return escalate(`cannot run \`${command}\`: ${e.describe()}`);
    throw e;
  }
  if (out.exitCode === 0) return done(true, `\`${command}\` passes after ${progress.fixes} fix(es)`);
  if (progress.fixes >= progress.config.max_tries) return done(false, `\`${command}\` still fails after ${progress.fixes} fix(es)`);
  progress.fixes += 1;
  log.info(`\`${command}\` fails; asking the agent for fix ${progress.fixes} of ${progress.config.max_tries}`);
  state.set('progress', progress);
  const tail = (out.stdout + out.stderr).split('\n').slice(-30).join('\n');
  return inject(`\`${command}\` fails:\n${tail}\nFix the code so that it passes.`);
}

export const policy = definePolicy({
  name: '{{name}}',
  version: '0.1.0',
  description: 'Run a check; while it fails, hand the failure to the agent',

  onStart(input) {
    return check({ config: parseConfig(input), fixes: 0 });
  },

  onTurnComplete() {
    const progress = state.get('progress');
    if (progress === undefined) throw new PolicyError('{{name}}: a turn arrived before the run started');
    return check(progress);
  },
});

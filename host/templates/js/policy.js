// {{name}}: a loopbox policy. It runs a check command; while the check fails, it
// hands the failure to the agent and checks again, up to `max_tries` times.
//
// Input (`loopbox run {{name}}.wasm --input '{...}'`):
//   {"check": ["make", "test"], "max_tries": 3}
import { shell } from 'loopbox:policy/actions@0.1.0';
import { write } from 'loopbox:policy/log@0.1.0';
import { get, set } from 'loopbox:policy/state@0.1.0';

const EXPECTED = '{"check": ["make", "test"], "max_tries": 3}';

function parseConfig(text) {
  let raw;
  try {
    raw = JSON.parse(text);
  } catch (e) {
    throw `{{name}}: bad input: ${e.message}; expected ${EXPECTED}`;
  }
  const { check = ['make', 'test'], max_tries = 3, ...rest } = raw ?? {};
  if (Object.keys(rest).length) throw `{{name}}: bad input: unknown field \`${Object.keys(rest)[0]}\`; expected ${EXPECTED}`;
  if (!Array.isArray(check) || !check.length || !check.every((a) => typeof a === 'string')) throw `{{name}}: bad input: \`check\` must be a list of strings`;
  if (!Number.isInteger(max_tries) || max_tries < 0) throw `{{name}}: bad input: \`max_tries\` must be a whole number`;
  return { check, max_tries };
}

function done(success, summary) {
  return { tag: 'done', val: { success, summary } };
}

function check(progress) {
  const argv = progress.config.check;
  const command = argv.join(' ');
  let out;
  try {
    out = shell({ tag: 'exec', val: { argv, env: [] } });
  } catch (e) {
    // A refusal is an answer, not a crash: say what is missing and hand over.
    return { tag: 'escalate', val: `cannot run \`${command}\`: ${e.payload?.tag ?? 'error'}: ${e.payload?.val ?? e}` };
  }
  if (out.exitCode === 0) return done(true, `\`${command}\` passes after ${progress.fixes} fix(es)`);
  if (progress.fixes >= progress.config.max_tries) return done(false, `\`${command}\` still fails after ${progress.fixes} fix(es)`);
  progress.fixes += 1;
  write('info', `\`${command}\` fails; asking the agent for fix ${progress.fixes} of ${progress.config.max_tries}`);
  set('progress', JSON.stringify(progress));
  const tail = (out.stdout + out.stderr).split('\n').slice(-30).join('\n');
  return { tag: 'inject', val: `\`${command}\` fails:\n${tail}\nFix the code so that it passes.` };
}

export const policy = {
  info() {
    return { name: '{{name}}', version: '0.1.0', description: 'Run a check; while it fails, hand the failure to the agent' };
  },

  handle(event) {
    if (event.tag === 'start') return check({ config: parseConfig(event.val), fixes: 0 });
    if (event.tag === 'turn-complete') {
      const stored = get('progress');
      if (stored === undefined) throw '{{name}}: a turn arrived before the run started';
      return check(JSON.parse(stored));
    }
    return { tag: 'pass' };
  },
};

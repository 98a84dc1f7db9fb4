// The Ralph loop in JavaScript: keep feeding the agent the same prompt until its
// reply carries the completion promise (<promise>TEXT</promise>) or iterations
// run out. The same policy as guests/rust/ralph and guests/python/ralph; the
// comparison benchmarks (bench/) run all three on the same turns. Written with
// the loopbox-policy SDK (guests/js/sdk); world decider.
import { Policy, PolicyError, done, inject, state } from '../sdk/index.js';

const KEY = 'ralph';
const EXPECTED = '; expected {"prompt": "...", "completion_promise": "...", "max_iterations": N}';

function findPromise(text) {
  const start = text.indexOf('<promise>');
  if (start < 0) return null;
  const from = start + '<promise>'.length;
  const end = text.indexOf('</promise>', from);
  return end < 0 ? null : text.slice(from, end).trim();
}

function iterationPrompt(config, n) {
  return config.max_iterations > 0
    ? `${config.prompt}\n\n[ralph iteration ${n} of ${config.max_iterations}]`
    : `${config.prompt}\n\n[ralph iteration ${n}]`;
}

function parseConfig(json) {
  let raw;
  try {
    raw = JSON.parse(json);
  } catch (e) {
    throw new PolicyError(`ralph: bad input: ${e.message}${EXPECTED}`);
  }
  if (raw === null || typeof raw !== 'object') throw new PolicyError(`ralph: bad input: not an object${EXPECTED}`);
  for (const k of Object.keys(raw)) {
    if (!['prompt', 'completion_promise', 'max_iterations'].includes(k)) throw new PolicyError(`ralph: bad input: unknown field \`${k}\`${EXPECTED}`);
  }
  if (typeof raw.prompt !== 'string') throw new PolicyError(`ralph: bad input: missing field \`prompt\`${EXPECTED}`);
  if (!raw.prompt.trim()) throw new PolicyError('ralph: bad input: `prompt` is empty');
  const max = raw.max_iterations ?? 0;
  if (!Number.isInteger(max) || max < 0) throw new PolicyError(`ralph: bad input: \`max_iterations\` must be a whole number${EXPECTED}`);
  return { prompt: raw.prompt, completion_promise: raw.completion_promise ?? null, max_iterations: max };
}

class Ralph extends Policy {
  name = 'ralph';
  version = '0.1.0';
  description = 'Re-feed a prompt until the reply carries the completion promise or iterations run out';

  onStart(input) {
    const config = parseConfig(input);
    state.set(KEY, { config, iteration: 1 });
    return inject(iterationPrompt(config, 1));
  }

  onTurnComplete(turn) {
    const p = state.get(KEY);
    if (p === undefined) {
      throw new PolicyError('ralph: a turn arrived before the run started; deliver `start` with the loop\'s input first');
    }
    const promise = p.config.completion_promise;
    if (promise !== null && promise === findPromise(turn.response)) {
      return done(true, `completion promise found after ${p.iteration} iteration(s)`);
    }
    if (p.config.max_iterations > 0 && p.iteration >= p.config.max_iterations) {
      return done(false, `max_iterations (${p.config.max_iterations}) reached without the completion promise`);
    }
    p.iteration += 1;
    state.set(KEY, p);
    return inject(iterationPrompt(p.config, p.iteration));
  }
}

export const policy = new Ralph();

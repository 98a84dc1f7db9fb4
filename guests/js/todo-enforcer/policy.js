// The todo enforcer in JavaScript: while the agent's reply still lists unchecked
// `- [ ]` items, send it back to work, up to a limit of consecutive forced
// continuations. The same policy as guests/rust/todo-enforcer. Written with the
// loopbox-policy SDK (guests/js/sdk); world decider.
import { PolicyError, definePolicy, inject, state, wait } from '../sdk/index.js';

const KEY = 'todo-enforcer';
const DEFAULT_MESSAGE =
  'You still have {count} unchecked todo item(s). Continue working, and mark each item `- [x]` when it is done.';

function openItems(text) {
  return text
    .split('\n')
    .map((l) => l.trimStart())
    .filter((l) => ['- [ ]', '* [ ]', '+ [ ]'].some((m) => l.startsWith(m))).length;
}

function parseConfig(json) {
  let raw;
  try {
    raw = JSON.parse(json);
  } catch (e) {
    throw new PolicyError(`todo-enforcer: bad input: ${e.message}`);
  }
  const known = new Set(['prompt', 'message', 'max_continuations']);
  for (const k of Object.keys(raw)) {
    if (!known.has(k)) throw new PolicyError(`todo-enforcer: bad input: unknown field \`${k}\``);
  }
  return {
    prompt: raw.prompt ?? null,
    message: raw.message ?? DEFAULT_MESSAGE,
    max_continuations: raw.max_continuations ?? 3,
  };
}

function load() {
  return state.get(KEY) ?? { config: { prompt: null, message: DEFAULT_MESSAGE, max_continuations: 3 }, forced: 0 };
}

export const policy = definePolicy({
  name: 'todo-enforcer',
  version: '0.1.0',
  description: 'Send the agent back to work while its reply still has unchecked todo items',

  onStart(input) {
    const config = parseConfig(input);
    state.set(KEY, { config, forced: 0 });
    return config.prompt === null ? wait() : inject(config.prompt);
  },

  onTurnComplete(turn) {
    const p = load();
    // A turn the agent started on its own ends any run of forced continuations.
    if (!turn.continuation) p.forced = 0;
    const count = openItems(turn.response);
    let decision;
    if (count > 0 && p.forced < p.config.max_continuations) {
      p.forced += 1;
      decision = inject(p.config.message.replaceAll('{count}', String(count)));
    } else {
      p.forced = 0;
      decision = wait();
    }
    state.set(KEY, p);
    return decision;
  },
});

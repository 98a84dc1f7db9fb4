// The todo enforcer in JavaScript: while the agent's reply still lists unchecked
// `- [ ]` items, send it back to work, up to a limit of consecutive forced
// continuations. The same policy as guests/rust/todo-enforcer.
import { get, set } from 'loopbox:policy/state@0.1.0';

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
    throw `todo-enforcer: bad input: ${e.message}`;
  }
  const known = new Set(['prompt', 'message', 'max_continuations']);
  for (const k of Object.keys(raw)) {
    if (!known.has(k)) throw `todo-enforcer: bad input: unknown field \`${k}\``;
  }
  return {
    prompt: raw.prompt ?? null,
    message: raw.message ?? DEFAULT_MESSAGE,
    max_continuations: raw.max_continuations ?? 3,
  };
}

function load() {
  const stored = get(KEY);
  return stored === undefined
    ? { config: { prompt: null, message: DEFAULT_MESSAGE, max_continuations: 3 }, forced: 0 }
    : JSON.parse(stored);
}

export const policy = {
  info() {
    return {
      name: 'todo-enforcer',
      version: '0.1.0',
      description: 'Send the agent back to work while its reply still has unchecked todo items',
    };
  },

  handle(event) {
    switch (event.tag) {
      case 'start': {
        const config = parseConfig(event.val);
        set(KEY, JSON.stringify({ config, forced: 0 }));
        return config.prompt === null ? { tag: 'pass' } : { tag: 'inject', val: config.prompt };
      }
      case 'turn-complete': {
        const p = load();
        // A turn the agent started on its own ends any run of forced continuations.
        if (!event.val.continuation) p.forced = 0;
        const count = openItems(event.val.response);
        let decision;
        if (count > 0 && p.forced < p.config.max_continuations) {
          p.forced += 1;
          decision = { tag: 'inject', val: p.config.message.replaceAll('{count}', String(count)) };
        } else {
          p.forced = 0;
          decision = { tag: 'pass' };
        }
        set(KEY, JSON.stringify(p));
        return decision;
      }
      default:
        return { tag: 'pass' };
    }
  },
};

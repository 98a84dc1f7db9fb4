// loopbox-policy: write a loopbox loop policy in JavaScript or TypeScript.
//
//   import { definePolicy, done, inject, state } from './loopbox-policy/index.js';
//   import { exec } from './loopbox-policy/actions.js';   // world loop-policy only
//
//   export const policy = definePolicy({
//     name: 'green-tests',
//     description: 'Re-run the tests until they pass',
//     onTurnComplete(turn) {
//       const out = exec(['make', 'test']).run();   // throws an ActionError when refused
//       return out.exitCode === 0 ? done(true, 'green') : inject(`The tests fail:\n${out.stdout}`);
//     },
//   });
//
// This module imports only `state` and `log`, so a policy using it alone can be
// built for the `decider` world; actions.js (commands, prompts, files) needs
// `loop-policy`. Types: index.d.ts. Contract: loopbox:policy@0.4.0 (CONTRACT).
import * as hostState from 'loopbox:policy/state@0.4.0';
import * as hostLog from 'loopbox:policy/log@0.4.0';
import { PolicyError, ActionError, hostMessage } from './errors.js';

export {
  PolicyError,
  WorkspaceError,
  ActionError,
  Denied,
  Declined,
  BudgetExhausted,
  Invalid,
  Unavailable,
  OutcomeUnknown,
} from './errors.js';

/** The contract this SDK is written against (`package loopbox:policy@...` in wit/policy.wit). */
export const CONTRACT = '0.4.0';

// --- decisions ---------------------------------------------------------------

function text(what, value) {
  if (typeof value !== 'string') throw new TypeError(`${what}(...) takes text, not ${value === null ? 'null' : typeof value}`);
  return value;
}

/** JSON text for `value`, or a TypeError naming `what` when it is not JSON. */
function toJson(what, value) {
  let json;
  try {
    json = JSON.stringify(value, (_, v) => {
      if (typeof v === 'number' && !Number.isFinite(v)) throw new TypeError(`${v} is not a JSON number`);
      return v;
    });
  } catch (e) {
    throw new TypeError(`${what}: the value is not JSON: ${e.message}`);
  }
  if (json === undefined) throw new TypeError(`${what}: the value is not JSON: ${typeof value}`);
  return json;
}

/** Nothing to add: the agent may stop, the tool call proceeds (the contract's `pass`). */
export const wait = () => ({ tag: 'pass' });
/** Send `message` to the agent as its next turn. */
export const inject = (message) => ({ tag: 'inject', val: text('inject', message) });
/** Refuse: cancel the tool call or the chain; `reason` is shown to the agent. */
export const block = (reason) => ({ tag: 'block', val: text('block', reason) });
/** Replace the event's payload (a tool call's input) with `value`, a JSON value. */
export const rewrite = (value) => ({ tag: 'rewrite', val: toJson('rewrite', value) });
/** Ask a person; the run pauses until their answer arrives as `onUserInput`. */
export const ask = (question) => ({ tag: 'ask', val: text('ask', question) });
/** Hand the run to a person and park it; `reason` says why. */
export const escalate = (reason) => ({ tag: 'escalate', val: text('escalate', reason) });
/**
 * Park the run until `untilMs` (milliseconds since the Unix epoch), then have
 * it woken with a `tick` carrying `payload` (any JSON value); `reason` is shown
 * to the person.
 */
export function sleepUntil(untilMs, payload, reason) {
  if (!Number.isSafeInteger(untilMs) || untilMs < 0) throw new TypeError(`sleepUntil: ${untilMs} is not a time in milliseconds`);
  return { tag: 'sleep', val: { untilMs: BigInt(untilMs), tick: toJson('sleepUntil', payload), reason: text('sleepUntil', reason) } };
}

/** Finish the run; `data` (any JSON value) is structured detail for scripts. */
export function done(success, summary, data) {
  if (typeof success !== 'boolean') throw new TypeError(`done(success, summary): success must be true or false, not ${success}`);
  return {
    tag: 'done',
    val: { success, summary: text('done', summary), data: data === undefined ? undefined : toJson('done', data) },
  };
}

// --- state and log -----------------------------------------------------------

function jsonType(v) {
  return v === null ? 'null' : Array.isArray(v) ? 'array' : typeof v;
}

/**
 * The run's durable state: JSON values under string keys. Writes are seen by
 * later reads in the same event and committed with its decision; a failed
 * event's writes are dropped.
 */
export const state = {
  /**
   * The value under `key`; `fallback` (undefined) when there is none. With a
   * fallback, a stored value of another JSON type is a PolicyError naming the key.
   */
  get(key, fallback) {
    const json = hostState.get(key);
    if (json === undefined) return fallback;
    const value = JSON.parse(json);
    if (fallback !== undefined && fallback !== null && jsonType(value) !== jsonType(fallback)) {
      throw new PolicyError(`state \`${key}\` is not the expected shape: expected ${jsonType(fallback)}, found ${jsonType(value)}`);
    }
    return value;
  },
  /** Store `value` (any JSON value); a PolicyError naming the limit when it is too large. */
  set(key, value) {
    let json;
    try {
      json = toJson(`state \`${key}\``, value);
    } catch (e) {
      throw new PolicyError(e.message);
    }
    try {
      hostState.set(key, json);
    } catch (e) {
      throw new PolicyError(hostMessage(e));
    }
  },
  /** Forget `key`; nothing happens when it is absent. */
  remove(key) {
    hostState.remove(key);
  },
  /** The keys that begin with `prefix`, sorted (`''` lists all). */
  keys(prefix = '') {
    return hostState.keys(prefix);
  },
};

/** Messages for the run log, and the run's one-line status. */
export const log = {
  debug: (message) => hostLog.write('debug', message),
  info: (message) => hostLog.write('info', message),
  warn: (message) => hostLog.write('warn', message),
  error: (message) => hostLog.write('error', message),
  /** The status line shown while the run goes; replaces the last, not logged. */
  progress: (message) => hostLog.progress(message),
};

// --- the policy --------------------------------------------------------------

const DECISIONS = new Set(['pass', 'inject', 'block', 'rewrite', 'ask', 'done', 'escalate']);

function short(value) {
  let s;
  try {
    s = value === undefined ? 'undefined' : JSON.stringify(value);
  } catch {
    s = String(value);
  }
  return s.length <= 60 ? s : `${s.slice(0, 57)}...`;
}

/**
 * The base of a policy: subclass it, set `name`, `version` and `description`,
 * override the `on*` handlers of the events it cares about (each returns a
 * decision; the others `wait()`), and export an instance as `policy`. Or use
 * `definePolicy({...})`. Override `handle` to see every event whole.
 *
 * An uncaught PolicyError (an ActionError included) fails the event with its
 * message; any other exception fails it too, with its stack in the run log.
 */
export class Policy {
  name = 'policy';
  version = '0.1.0';
  description = '';

  constructor() {
    // The exported object's methods may be called unbound.
    this.info = this.info.bind(this);
    this.handle = this.handle.bind(this);
  }

  info() {
    return { name: this.name, version: this.version, description: this.description };
  }

  onStart(_input) {
    return wait();
  }
  onTurnComplete(_turn) {
    return wait();
  }
  onToolCall(_call) {
    return wait();
  }
  onTick(_snapshot) {
    return wait();
  }
  onUserInput(_answer) {
    return wait();
  }
  onCustom(_name, _payload) {
    return wait();
  }

  /** Call the handler for `event`'s kind. */
  dispatch(event) {
    switch (event.tag) {
      case 'start':
        return this.onStart(event.val);
      case 'turn-complete':
        return this.onTurnComplete(event.val);
      case 'tool-call':
        return this.onToolCall(event.val);
      case 'tick':
        return this.onTick(event.val);
      case 'user-input':
        return this.onUserInput(event.val);
      case 'custom':
        return this.onCustom(event.val[0], event.val[1]);
      default:
        throw new PolicyError(`an event of a kind this SDK does not know: ${short(event)}`);
    }
  }

  /** What the host calls: `dispatch`, with a PolicyError turned into the event's error. */
  handle(event) {
    let decision;
    try {
      decision = this.dispatch(event);
    } catch (e) {
      // A thrown string is the policy's `err`.
      if (e instanceof ActionError) throw e.describe();
      if (e instanceof PolicyError) throw e.message;
      throw e;
    }
    if (decision === null || typeof decision !== 'object' || !DECISIONS.has(decision.tag)) {
      throw `the handler of ${event.tag} returned ${short(decision)}, not a decision: return wait(), inject(...), block(...), rewrite(...), ask(...), done(...) or escalate(...) from loopbox-policy`;
    }
    return decision;
  }
}

/**
 * A policy from its description and handlers:
 * `export const policy = definePolicy({ name, version, description, onStart(input) {...}, ... })`.
 */
export function definePolicy(spec) {
  const p = new Policy();
  for (const [k, v] of Object.entries(spec)) {
    if (['name', 'version', 'description'].includes(k)) {
      if (typeof v !== 'string') throw new TypeError(`definePolicy: \`${k}\` must be a string`);
      p[k] = v;
    } else if (/^on[A-Z]/.test(k) && k in p && typeof v === 'function') {
      p[k] = v;
    } else {
      throw new TypeError(
        `definePolicy: unknown key \`${k}\`; expected name, version, description, onStart, onTurnComplete, onToolCall, onTick, onUserInput, onCustom`,
      );
    }
  }
  return p;
}

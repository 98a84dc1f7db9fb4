// The exceptions a policy sees (part of loopbox-policy; no host imports, so
// both index.js and actions.js share them). A PolicyError the policy does not
// catch fails the event with its message; an ActionError is the host's refusal
// of an action, with one subclass per kind.

/** Fails the event with this message when the policy does not catch it. */
export class PolicyError extends Error {
  constructor(message) {
    super(message);
    this.name = new.target.name;
  }
}

/** A workspace file or directory could not be read; the message says why. */
export class WorkspaceError extends PolicyError {}

/**
 * The host did not run an action. `kind` is the contract's name for why
 * (`denied`, `declined`, `budget-exhausted`, `invalid`, `unavailable`,
 * `outcome-unknown`); `message` is the host's text, which names the key that
 * would allow it. Catch a subclass (`Denied`, ...) to handle one kind.
 */
export class ActionError extends PolicyError {
  static kind = 'action-error';

  get kind() {
    return this.constructor.kind;
  }

  /** One line for a log or an escalation: `denied: <why, and the key that would allow it>`. */
  describe() {
    const kind = this.kind.replace(/-/g, ' ');
    return this.message ? `${kind}: ${this.message}` : kind;
  }

  toString() {
    return this.describe();
  }
}

export class Denied extends ActionError {
  static kind = 'denied';
}
export class Declined extends ActionError {
  static kind = 'declined';
}
export class BudgetExhausted extends ActionError {
  static kind = 'budget-exhausted';
}
export class Invalid extends ActionError {
  static kind = 'invalid';
}
export class Unavailable extends ActionError {
  static kind = 'unavailable';
}
export class OutcomeUnknown extends ActionError {
  static kind = 'outcome-unknown';

  describe() {
    return 'outcome unknown: the run was interrupted while this action ran, so it may or may not have happened';
  }
}

const KINDS = {
  denied: Denied,
  declined: Declined,
  'budget-exhausted': BudgetExhausted,
  invalid: Invalid,
  unavailable: Unavailable,
  'outcome-unknown': OutcomeUnknown,
};

/**
 * The exception for what a host call threw: the bindings throw an Error whose
 * `payload` is the `action-error` ({ tag, val }). Anything else is rethrown as it is.
 * @internal
 */
export function actionError(e) {
  const payload = e?.payload;
  const cls = payload && KINDS[payload.tag];
  if (!cls) return e;
  return new cls(typeof payload.val === 'string' ? payload.val : '');
}

/** The host's message in an error a `result<_, string>` import threw. @internal */
export function hostMessage(e) {
  return typeof e?.payload === 'string' ? e.payload : String(e?.message ?? e);
}

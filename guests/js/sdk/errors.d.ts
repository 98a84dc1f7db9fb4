/** Fails the event with this message when the policy does not catch it. */
export class PolicyError extends Error {
  constructor(message: string);
}
/** A workspace file or directory could not be read; the message says why. */
export class WorkspaceError extends PolicyError {}
export type ActionErrorKind = 'denied' | 'declined' | 'budget-exhausted' | 'invalid' | 'unavailable' | 'outcome-unknown';
/** The host did not run an action; `kind` says why, `message` is the host's text. */
export class ActionError extends PolicyError {
  static readonly kind: ActionErrorKind | 'action-error';
  readonly kind: ActionErrorKind;
  /** `denied: <why, and the key that would allow it>`. */
  describe(): string;
}
export class Denied extends ActionError {}
export class Declined extends ActionError {}
export class BudgetExhausted extends ActionError {}
export class Invalid extends ActionError {}
export class Unavailable extends ActionError {}
export class OutcomeUnknown extends ActionError {}
/** @internal */
export function actionError(e: unknown): unknown;
/** @internal */
export function hostMessage(e: unknown): string;

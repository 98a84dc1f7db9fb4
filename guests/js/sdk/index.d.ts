/// <reference path="./contract.d.ts" />
import type { Decision, Event, Json, Origin, ToolCall, Turn } from 'loopbox:policy/types@0.4.0';
import type { PolicyInfo } from 'loopbox:policy/policy@0.4.0';

export type { Decision, Event, Json, Origin, ToolCall, Turn, PolicyInfo };
export {
  PolicyError,
  WorkspaceError,
  ActionError,
  ActionErrorKind,
  Denied,
  Declined,
  BudgetExhausted,
  Invalid,
  Unavailable,
  OutcomeUnknown,
} from './errors.js';

/** A JSON value, as JSON.parse returns it. */
export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };

/** The contract this SDK is written against. */
export const CONTRACT: '0.4.0';

/** Nothing to add: the agent may stop, the tool call proceeds (the contract's `pass`). */
export function wait(): Decision;
/** Send `message` to the agent as its next turn. */
export function inject(message: string): Decision;
/** Refuse: cancel the tool call or the chain; `reason` is shown to the agent. */
export function block(reason: string): Decision;
/** Replace the event's payload (a tool call's input) with `value`, any JSON value. */
export function rewrite(value: unknown): Decision;
/** Ask a person; the run pauses until their answer arrives as `onUserInput`. */
export function ask(question: string): Decision;
/** Hand the run to a person and park it; `reason` says why. */
export function escalate(reason: string): Decision;
/** Park the run until `untilMs` (ms since the Unix epoch), then wake it with a `tick` carrying `payload`. */
export function sleepUntil(untilMs: number, payload: unknown, reason: string): Decision;
/** Finish the run; `data` (any JSON value) is structured detail for scripts. */
export function done(success: boolean, summary: string, data?: unknown): Decision;

/** The run's durable state: JSON values under string keys. */
export const state: {
  /** The value under `key` (of the type the policy stored there, as JSON.parse gives `any`), or undefined. */
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  get<T = any>(key: string): T | undefined;
  /** The value under `key`, or `fallback`; a stored value of another JSON type throws a PolicyError. */
  get<T>(key: string, fallback: T): T;
  /** Store `value`, any JSON value; a PolicyError when it is not JSON, or names the limit when it is too large. */
  set(key: string, value: unknown): void;
  remove(key: string): void;
  keys(prefix?: string): string[];
};

/** Messages for the run log, and the run's one-line status. */
export const log: {
  debug(message: string): void;
  info(message: string): void;
  warn(message: string): void;
  error(message: string): void;
  progress(message: string): void;
};

/** The handlers of a policy; each returns a decision. */
export interface Handlers {
  /** The run begins; `input` is its input as JSON text (`{}` when none). */
  onStart(input: Json): Decision;
  /** An agent turn finished: `turn.response` is its final message. */
  onTurnComplete(turn: Turn): Decision;
  /** The agent is about to use a tool. */
  onToolCall(call: ToolCall): Decision;
  /** A periodic observation, as JSON text. */
  onTick(snapshot: Json): Decision;
  /** A person's answer to an earlier `ask`. */
  onUserInput(answer: string): Decision;
  /** Any other hook event: its name and the hook's JSON input as text. */
  onCustom(name: string, payload: Json): Decision;
}

/** The base of a policy: subclass it and export an instance as `policy`. */
export class Policy implements Handlers {
  name: string;
  version: string;
  description: string;
  info(): PolicyInfo;
  onStart(input: Json): Decision;
  onTurnComplete(turn: Turn): Decision;
  onToolCall(call: ToolCall): Decision;
  onTick(snapshot: Json): Decision;
  onUserInput(answer: string): Decision;
  onCustom(name: string, payload: Json): Decision;
  /** Call the handler for `event`'s kind. */
  dispatch(event: Event): Decision;
  /** What the host calls. */
  handle(event: Event): Decision;
}

/** `export const policy = definePolicy({ name, description, onStart(input) {...} })`. */
export function definePolicy(
  spec: { name: string; version?: string; description?: string } & Partial<Handlers> & ThisType<Policy>,
): Policy;

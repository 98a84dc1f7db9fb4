// TypeScript declarations for the bindings componentize-js generates from
// loopbox's contract, loopbox:policy@0.4.0 (wit/policy.wit), in its
// conventions: variants are { tag, val } with kebab-case tags, records have
// camelCase fields, an absent option is undefined, u64 is a bigint, and a
// function returning result<T, E> returns T or throws an Error whose
// `payload` is the E. A policy using loopbox-policy rarely needs these.

declare module 'loopbox:policy/types@0.4.0' {
  /** A JSON document as UTF-8 text. */
  export type Json = string;
  export interface Origin {
    /** `claude-code`, `codex` or `gemini`. */
    agent: string;
    /** The agent's own name for the hook event (`Stop`, `PreToolUse`, ...). */
    event: string;
    agentId?: string;
    permissionMode?: string;
    /** The agent's own name for the tool, when it differs from `name`. */
    tool?: string;
  }
  export interface Turn {
    sessionId: string;
    /** The assistant's final message for the turn. */
    response: string;
    /** 1-based count of turns seen in this run. */
    index: number;
    /** True when this turn answered an earlier `inject`. */
    continuation: boolean;
    origin?: Origin;
  }
  export interface ToolCall {
    /** `Bash`, `Edit`, ... in one vocabulary whatever the agent. */
    name: string;
    /** The tool's input, a JSON object as text. */
    input: Json;
    origin?: Origin;
  }
  export type Event =
    | { tag: 'start'; val: Json }
    | { tag: 'turn-complete'; val: Turn }
    | { tag: 'tool-call'; val: ToolCall }
    | { tag: 'tick'; val: Json }
    | { tag: 'user-input'; val: string }
    | { tag: 'custom'; val: [string, Json] };
  export interface Outcome {
    success: boolean;
    summary: string;
    data?: Json;
  }
  export interface Timer {
    /** When to wake, in milliseconds since the Unix epoch. */
    untilMs: bigint;
    /** The payload of the `tick` the run wakes with. */
    tick: Json;
    reason: string;
  }
  export type Decision =
    | { tag: 'pass' }
    | { tag: 'inject'; val: string }
    | { tag: 'block'; val: string }
    | { tag: 'rewrite'; val: Json }
    | { tag: 'ask'; val: string }
    | { tag: 'done'; val: Outcome }
    | { tag: 'escalate'; val: string }
    | { tag: 'sleep'; val: Timer };
}

declare module 'loopbox:policy/actions@0.4.0' {
  import type { Json } from 'loopbox:policy/types@0.4.0';
  export interface Command {
    argv: string[];
    cwd?: string;
    env: [string, string][];
    stdin?: string;
    timeoutMs?: bigint;
  }
  export interface Script {
    source: string;
    cwd?: string;
    timeoutMs?: bigint;
  }
  export type ShellRequest = { tag: 'exec'; val: Command } | { tag: 'script'; val: Script };
  export type PromptKind = 'prompt' | 'slash-command';
  export interface PromptRequest {
    text: string;
    kind: PromptKind;
    model?: string;
    session?: string;
    timeoutMs?: bigint;
    /** A named agent profile of the user's loopbox.toml (`[agents.NAME]`). */
    profile?: string;
    /** Where the agent runs, relative to the workspace root. */
    cwd?: string;
  }
  export interface Output {
    /** Absent when the process was killed by a signal (a timeout, for instance). */
    exitCode?: number;
    stdout: string;
    stderr: string;
    durationMs: bigint;
    timedOut: boolean;
    truncated: boolean;
    /** The agent conversation id, for prompts that can be continued. */
    session?: string;
  }
  export type ActionError =
    | { tag: 'denied'; val: string }
    | { tag: 'declined'; val: string }
    | { tag: 'budget-exhausted'; val: string }
    | { tag: 'invalid'; val: string }
    | { tag: 'unavailable'; val: string }
    | { tag: 'outcome-unknown' };
  /** Throws an Error whose `payload` is the ActionError. */
  export function shell(req: ShellRequest): Output;
  /** Throws an Error whose `payload` is the ActionError. */
  export function prompt(req: PromptRequest): Output;
  /** Throws an Error whose `payload` is the ActionError. */
  export function worktreeAdd(branch: string): string;
  /** Throws an Error whose `payload` is the ActionError. */
  export function worktreeRemove(path: string): void;
  /** Throws an Error whose `payload` is the ActionError. */
  export function worktreeAt(revision: string, copy: string[]): string;
  export interface McpRequest {
    server: string;
    tool: string;
    /** The tool's arguments: a JSON object, as text. */
    arguments: Json;
    timeoutMs?: bigint;
  }
  export type McpStatus = 'ok' | 'tool-error' | 'not-found' | 'no-answer';
  export interface McpResult {
    status: McpStatus;
    /** The server's `result` (or JSON-RPC `error`), as JSON text. */
    answer: Json;
    durationMs: bigint;
  }
  /** Throws an Error whose `payload` is the ActionError. */
  export function mcpCall(req: McpRequest): McpResult;
  /** Throws an Error whose `payload` is the ActionError. */
  export function snapshot(paths: string[]): string;
  /** Throws an Error whose `payload` is the ActionError. */
  export function restore(snapshot: string, paths: string[]): string[];
  export function forgetSnapshot(snapshot: string): void;
}

declare module 'loopbox:policy/state@0.4.0' {
  export function get(key: string): string | undefined;
  /** Throws an Error whose `payload` names the limit. */
  export function set(key: string, value: string): void;
  export function remove(key: string): void;
  export function keys(prefix: string): string[];
}

declare module 'loopbox:policy/workspace@0.4.0' {
  /** Throws an Error whose `payload` says why. */
  export function read(path: string): string;
  /** Throws an Error whose `payload` says why. */
  export function listDir(dir: string): string[];
}

declare module 'loopbox:policy/log@0.4.0' {
  export type Level = 'debug' | 'info' | 'warn' | 'error';
  export function write(level: Level, message: string): void;
  export function progress(message: string): void;
}

declare module 'loopbox:policy/policy@0.4.0' {
  export interface PolicyInfo {
    name: string;
    version: string;
    description: string;
  }
}

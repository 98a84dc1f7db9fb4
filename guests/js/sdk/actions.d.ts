/// <reference path="./contract.d.ts" />
import type { Output as HostOutput } from 'loopbox:policy/actions@0.4.0';

/** What a finished action produced (`durationMs` as a number). */
export type Output = Omit<HostOutput, 'durationMs'> & { durationMs: number };

/** A command to run, built up then `run()`. Methods return a new Exec. */
export class Exec {
  constructor(argv: readonly string[]);
  readonly argv: string[];
  /** Run in `dir`, relative to the workspace root. */
  cwd(dir: string): Exec;
  /** Set a variable (the user must list its name in `shell.pass_env_from_policy`). */
  env(name: string, value: string): Exec;
  stdin(input: string): Exec;
  timeoutMs(ms: number): Exec;
  /** Throws an ActionError when the host refuses or cannot run it. */
  run(): Output;
}
/** A program with its arguments, executed directly (no shell). */
export function exec(argv: readonly string[]): Exec;
/** Shell text run with `sh -c`; needs the user's `shell.scripts` grant. Throws an ActionError. */
export function script(source: string, options?: { timeoutMs?: number; cwd?: string }): Output;

/** A message to the configured agent, built up then `send()`. */
export class Prompt {
  constructor(text: string);
  model(name: string): Prompt;
  /** Continue this agent conversation (an earlier output's `session`). */
  session(id: string): Prompt;
  timeoutMs(ms: number): Prompt;
  /** Send it to the user's `[agents.NAME]` profile instead of `[agent]` (an unknown name is denied). */
  profile(name: string): Prompt;
  /** Run the agent in `dir`, relative to the workspace root. */
  cwd(dir: string): Prompt;
  /** Throws an ActionError when refused; the reply is in `stdout`. */
  send(): Output;
}
export function prompt(text: string): Prompt;
export function slashCommand(command: string): Prompt;

/** Check out `branch` in a new git worktree the host makes (the user's `[worktree]` grant); its path, relative to the workspace. Throws an ActionError. */
export function worktreeAdd(branch: string): string;
/** Remove a worktree `worktreeAdd` made in this run. Throws an ActionError. */
export function worktreeRemove(path: string): void;

/** Check out `revision` in a new detached git worktree (the user's `[worktree]` grant), with `copy` copied in; its path. Throws an ActionError. */
export function worktreeAt(revision: string, copy?: readonly string[]): string;

/** What an MCP tool call returned. */
export interface McpReply {
  status: 'ok' | 'tool-error' | 'not-found' | 'no-answer';
  /** The server's `result` (or JSON-RPC `error`). */
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  answer: any;
  durationMs: number;
}
/** Call `tool` of the user's MCP server `server` (`[mcp.servers.NAME]`). Throws an ActionError. */
export function mcpCall(server: string, tool: string, args?: Record<string, unknown>, options?: { timeoutMs?: number }): McpReply;

/** Copies of workspace files the host keeps (the user's `workspace.restore` grant). */
export class Snapshot {
  /** Keep copies of `paths`. Throws an ActionError. */
  static take(paths: readonly string[]): Snapshot;
  readonly id: string;
  /** Put `paths` back as they were taken; the paths written. Throws an ActionError. */
  restore(paths: readonly string[]): string[];
  forget(): void;
}

/** Read-only access to the workspace's files; failures throw a WorkspaceError. */
export const workspace: {
  read(path: string): string;
  listDir(dir?: string): string[];
};

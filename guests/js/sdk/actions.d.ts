/// <reference path="./contract.d.ts" />
import type { Output as HostOutput } from 'loopbox:policy/actions@0.3.0';

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

/** Read-only access to the workspace's files; failures throw a WorkspaceError. */
export const workspace: {
  read(path: string): string;
  listDir(dir?: string): string[];
};

// loopbox-policy/actions: run commands, prompt the agent, read the workspace.
// It imports the `actions` and `workspace` interfaces, which only the
// `loop-policy` world has: a `decider` policy imports index.js alone.
// Every request is checked by the host against the user's grants; a refusal
// throws an ActionError (Denied, Declined, ...), never crashes. Types: actions.d.ts.
import {
  shell,
  prompt as hostPrompt,
  worktreeAdd as hostWorktreeAdd,
  worktreeRemove as hostWorktreeRemove,
  worktreeAt as hostWorktreeAt,
  mcpCall as hostMcpCall,
  snapshot as hostSnapshot,
  restore as hostRestore,
  forgetSnapshot as hostForgetSnapshot,
} from 'loopbox:policy/actions@0.4.0';
import { read as hostRead, listDir as hostListDir } from 'loopbox:policy/workspace@0.4.0';
import { WorkspaceError, actionError, hostMessage } from './errors.js';

function text(what, value) {
  if (typeof value !== 'string') throw new TypeError(`${what} takes text, not ${value === null ? 'null' : typeof value}`);
  return value;
}

function millis(ms) {
  if (ms === undefined) return undefined;
  if (!Number.isSafeInteger(ms) || ms < 0) throw new RangeError(`timeoutMs must be a whole number of milliseconds, not ${ms}`);
  return BigInt(ms);
}

/** The output with its u64 duration as a number. */
function output(out) {
  return { ...out, durationMs: Number(out.durationMs) };
}

function call(f, request) {
  try {
    return output(f(request));
  } catch (e) {
    throw actionError(e);
  }
}

/**
 * A command to run, built up then `run()`: `exec(['make', 'test']).cwd('web').run()`.
 * Each method returns a new Exec; the one it was called on is unchanged.
 */
export class Exec {
  #c;

  constructor(argv, c = {}) {
    if (typeof argv === 'string') {
      throw new TypeError('exec takes the program and its arguments as an array, not one string: exec([\'make\', \'test\']); for shell text use script(...)');
    }
    if (!Array.isArray(argv) || argv.length === 0 || !argv.every((a) => typeof a === 'string')) {
      throw new TypeError('exec takes a non-empty array of strings');
    }
    this.#c = { argv: [...argv], cwd: c.cwd, env: c.env ?? [], stdin: c.stdin, timeoutMs: c.timeoutMs };
  }

  #with(change) {
    return new Exec(this.#c.argv, { ...this.#c, ...change });
  }

  /** Run in `dir`, relative to the workspace root. */
  cwd(dir) {
    return this.#with({ cwd: text('cwd', dir) });
  }
  /** Set a variable (the user must list its name in `shell.pass_env_from_policy`). */
  env(name, value) {
    return this.#with({ env: [...this.#c.env, [text('env', name), text('env', value)]] });
  }
  /** Write `input` to the program's standard input (closed otherwise). */
  stdin(input) {
    return this.#with({ stdin: text('stdin', input) });
  }
  /** A wall-clock limit; the user's `shell.max_timeout_ms` caps it either way. */
  timeoutMs(ms) {
    millis(ms);
    return this.#with({ timeoutMs: ms });
  }
  get argv() {
    return [...this.#c.argv];
  }

  /** Run it; throws an ActionError when the host refuses or cannot run it. */
  run() {
    const c = this.#c;
    return call(shell, {
      tag: 'exec',
      val: { argv: [...c.argv], cwd: c.cwd, env: c.env.map((p) => [...p]), stdin: c.stdin, timeoutMs: millis(c.timeoutMs) },
    });
  }
}

/**
 * A program with its arguments, executed directly: no shell reads them, so
 * nothing in an argument is expanded or split. For shell text, see `script`.
 */
export const exec = (argv) => new Exec(argv);

/** Shell text run with `sh -c`; needs the user's `shell.scripts` grant. */
export function script(source, { timeoutMs, cwd } = {}) {
  return call(shell, { tag: 'script', val: { source: text('script', source), cwd, timeoutMs: millis(timeoutMs) } });
}

/** A message to the configured agent, built up then `send()`. Methods return a new Prompt. */
export class Prompt {
  #r;

  constructor(message, r = {}) {
    this.#r = { text: text('prompt', message), kind: r.kind ?? 'prompt', model: r.model, session: r.session, timeoutMs: r.timeoutMs, profile: r.profile, cwd: r.cwd };
  }

  #with(change) {
    return new Prompt(this.#r.text, { ...this.#r, ...change });
  }

  /** A model name, for runners that take one. */
  model(name) {
    return this.#with({ model: text('model', name) });
  }
  /** Continue this agent conversation (an earlier output's `session`). */
  session(id) {
    return this.#with({ session: text('session', id) });
  }
  timeoutMs(ms) {
    millis(ms);
    return this.#with({ timeoutMs: ms });
  }
  /** Send it to the user's `[agents.NAME]` profile instead of `[agent]`; an unknown name is denied. */
  profile(name) {
    return this.#with({ profile: text('profile', name) });
  }
  /** Run the agent in `dir`, relative to the workspace root. */
  cwd(dir) {
    return this.#with({ cwd: text('cwd', dir) });
  }

  /** Send it and wait for the reply (in `stdout`); throws an ActionError when refused. */
  send() {
    const r = this.#r;
    return call(hostPrompt, { text: r.text, kind: r.kind, model: r.model, session: r.session, timeoutMs: millis(r.timeoutMs), profile: r.profile, cwd: r.cwd });
  }
}

/**
 * Check out `branch` in a new git worktree the host makes (the user's
 * `[worktree]` grant); returns its path relative to the workspace, for
 * `exec(...).cwd(path)` and `prompt(...).cwd(path)`. Throws an ActionError.
 */
export function worktreeAdd(branch) {
  try {
    return hostWorktreeAdd(text('worktreeAdd', branch));
  } catch (e) {
    throw actionError(e);
  }
}

/** Remove a worktree `worktreeAdd` made in this run. Throws an ActionError. */
export function worktreeRemove(path) {
  try {
    hostWorktreeRemove(text('worktreeRemove', path));
  } catch (e) {
    throw actionError(e);
  }
}

/**
 * Check out `revision` in a new detached git worktree the host makes (the
 * user's `[worktree]` grant), with the workspace files `copy` names copied in;
 * its path relative to the workspace. Remove it with `worktreeRemove`.
 */
export function worktreeAt(revision, copy = []) {
  try {
    return hostWorktreeAt(text('worktreeAt', revision), copy.map((p) => text('worktreeAt', p)));
  } catch (e) {
    throw actionError(e);
  }
}

/**
 * Call `tool` of the MCP server the user's loopbox.toml names `server`, with
 * `args` (an object); `{ status, answer, durationMs }`, where `status` is
 * `ok`, `tool-error`, `not-found` or `no-answer` and `answer` the server's
 * result as a value. Throws an ActionError (a server or tool not granted: Denied).
 */
export function mcpCall(server, tool, args = {}, options = {}) {
  let r;
  try {
    r = hostMcpCall({
      server: text('mcpCall', server),
      tool: text('mcpCall', tool),
      arguments: JSON.stringify(args),
      timeoutMs: millis(options.timeoutMs),
    });
  } catch (e) {
    throw actionError(e);
  }
  return { status: r.status, answer: JSON.parse(r.answer), durationMs: Number(r.durationMs) };
}

/**
 * Copies of workspace files the host keeps outside the workspace (the user's
 * `workspace.restore` grant), to put back with `restore()`; `forget()` lets them go.
 */
export class Snapshot {
  #id;
  constructor(id) {
    this.#id = id;
  }
  /** Keep copies of `paths`; a missing one, or one that is not a regular file, as absent. */
  static take(paths) {
    try {
      return new Snapshot(hostSnapshot(paths.map((p) => text('Snapshot.take', p))));
    } catch (e) {
      throw actionError(e);
    }
  }
  get id() {
    return this.#id;
  }
  /** Put `paths` back as they were taken; the paths written. */
  restore(paths) {
    try {
      return hostRestore(this.#id, paths.map((p) => text('Snapshot.restore', p)));
    } catch (e) {
      throw actionError(e);
    }
  }
  forget() {
    hostForgetSnapshot(this.#id);
  }
}

/** Plain instructions for the agent. */
export const prompt = (message) => new Prompt(message);
/** A slash command (`/review`) for the agent, passed as written. */
export const slashCommand = (command) => new Prompt(command, { kind: 'slash-command' });

/** Read-only access to the workspace's files, by paths relative to its root. */
export const workspace = {
  /** The file's text; a WorkspaceError saying why it cannot be read. */
  read(path) {
    try {
      return hostRead(path);
    } catch (e) {
      throw new WorkspaceError(hostMessage(e));
    }
  },
  /** The names in `dir` (`''` for the root), sorted; directories end in `/`. */
  listDir(dir = '') {
    try {
      return hostListDir(dir);
    } catch (e) {
      throw new WorkspaceError(hostMessage(e));
    }
  },
};

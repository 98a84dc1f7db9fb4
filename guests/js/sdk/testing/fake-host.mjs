// The host's side of the imports for the SDK's native tests: state in a Map,
// every call recorded, shell and prompt answering with `answer` (an output, or
// { error: ActionError } to throw as componentize-js does). Import this
// module first, then the SDK with a dynamic import().
import { register } from 'node:module';
import { readFileSync } from 'node:fs';

register('./hooks.mjs', import.meta.url);

/** What componentize-js throws for a result's `err`: an Error carrying it in `payload`. */
export class ComponentError extends Error {
  constructor(payload) {
    super(typeof payload === 'string' ? payload : `${JSON.stringify(payload)} (see error.payload)`);
    this.payload = payload;
  }
}

export class FakeHost {
  constructor() {
    this.state = new Map();
    this.calls = [];
    this.answer = { exitCode: 0, stdout: 'ok\n', stderr: '', durationMs: 3n, timedOut: false, truncated: false, session: undefined };
    this.stateLimit = undefined;
    this.files = { 'README.md': 'read me' };
    globalThis.loopboxFakeHost = this;
  }

  action(name, request) {
    this.calls.push([name, request]);
    if (this.answer.error) throw new ComponentError(this.answer.error);
    return this.answer;
  }
}

/** The contract version of the repository's wit/policy.wit. */
export function witVersion() {
  const wit = readFileSync(new URL('../../../../wit/policy.wit', import.meta.url), 'utf8');
  return /^package loopbox:policy@([^;\s]+);/m.exec(wit)[1];
}


// The SDK's TypeScript declarations, checked by `tsc -p guests/js` (scripts/test.sh):
// what a policy may write type-checks, and what it may not is an error
// (each `@ts-expect-error` fails the check when the line below it compiles).
import {
  ActionError,
  Denied,
  Policy,
  PolicyError,
  definePolicy,
  done,
  inject,
  log,
  rewrite,
  state,
  wait,
  type Decision,
  type ToolCall,
  type Turn,
} from '../index.js';
import { exec, prompt, script, workspace, type Output } from '../actions.js';

class Gate extends Policy {
  name = 'gate';
  onToolCall(call: ToolCall): Decision {
    const input: { command?: string } = JSON.parse(call.input);
    return input.command === 'rm -rf /' ? rewrite({ command: 'true' }) : wait();
  }
  onTurnComplete(turn: Turn): Decision {
    const tries = state.get('tries', 0);
    const n: number = tries + 1;
    state.set('tries', n);
    const origin: string | undefined = turn.origin?.agent;
    log.info(`turn ${turn.index} from ${origin ?? 'the runner'}`);
    let out: Output;
    try {
      out = exec(['make', 'test']).cwd('web').env('CI', '1').timeoutMs(1000).run();
    } catch (e) {
      if (e instanceof Denied) return done(false, e.describe(), { kind: e.kind });
      if (e instanceof ActionError) throw new PolicyError(e.message);
      throw e;
    }
    const ms: number = out.durationMs;
    const code: number | undefined = out.exitCode;
    return code === 0 ? done(true, `green in ${ms} ms`) : inject(out.stdout + workspace.read('log.txt'));
  }
}
export const gate = new Gate();

export const policy = definePolicy({
  name: 'p',
  onStart(input) {
    const config: string = input;
    script('make', { timeoutMs: 5 });
    prompt('hi').session('s').send();
    return inject(config);
  },
});

// @ts-expect-error argv is an array of strings, not a string
exec('make test');
// @ts-expect-error a timeout is a number of milliseconds
exec(['x']).timeoutMs('5');
// @ts-expect-error done needs a summary
done(true);
// @ts-expect-error a handler returns a decision
definePolicy({ name: 'x', onStart: () => 'pass' });
// @ts-expect-error handlers have their names
definePolicy({ name: 'x', onTurn: () => wait() });

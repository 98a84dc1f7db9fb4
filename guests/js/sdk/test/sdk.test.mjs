// Unit tests of loopbox-policy, run natively: `node --test test/` in guests/js/sdk.
// The SDK runs unchanged; only its `loopbox:policy/*` imports, which exist
// inside a component alone, resolve to fakes (testing/).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { FakeHost, ComponentError, witVersion } from '../testing/fake-host.mjs';

const sdk = await import('../index.js');
const actions = await import('../actions.js');

test('the SDK imports the contract version of wit/ and says so', () => {
  assert.equal(sdk.CONTRACT, witVersion(), 'update the imports of index.js, actions.js and contract.d.ts to the version in wit/policy.wit');
  assert.deepEqual([...new Set(globalThis.loopboxImportedContracts)], [sdk.CONTRACT]);
  assert.deepEqual(globalThis.loopboxImportedContracts.length, 4);
});

test('exec builds the command the host receives, and its methods return new builders', () => {
  const host = new FakeHost();
  const base = actions.exec(['make', 'test']);
  const out = base.cwd('web').env('CI', '1').stdin('y\n').timeoutMs(60000).run();
  base.run();
  assert.deepEqual(host.calls[0], [
    'shell',
    { tag: 'exec', val: { argv: ['make', 'test'], cwd: 'web', env: [['CI', '1']], stdin: 'y\n', timeoutMs: 60000n } },
  ]);
  assert.deepEqual(host.calls[1], [
    'shell',
    { tag: 'exec', val: { argv: ['make', 'test'], cwd: undefined, env: [], stdin: undefined, timeoutMs: undefined } },
  ]);
  assert.equal(out.stdout, 'ok\n');
  assert.equal(out.durationMs, 3, 'the u64 duration comes back as a number');
});

test('exec refuses a string and values the host could not take', () => {
  assert.throws(() => actions.exec('make test'), /not one string.*script/);
  assert.throws(() => actions.exec([]), /non-empty array of strings/);
  assert.throws(() => actions.exec(['make', 3]), /non-empty array of strings/);
  for (const bad of [-1, 1.5, 2 ** 64, '5', Number.NaN]) {
    assert.throws(() => actions.exec(['true']).timeoutMs(bad), RangeError, String(bad));
  }
});

test('script and prompts', () => {
  const host = new FakeHost();
  actions.script('make test | tail -5', { timeoutMs: 1000 });
  actions.prompt('Fix it').model('m').session('s1').timeoutMs(5).send();
  actions.slashCommand('/review').send();
  actions.prompt('Eval').profile('specialist').cwd('wt').send();
  assert.equal(actions.worktreeAdd('feature'), host.answer);
  actions.worktreeRemove('wt');
  assert.deepEqual(host.calls, [
    ['shell', { tag: 'script', val: { source: 'make test | tail -5', cwd: undefined, timeoutMs: 1000n } }],
    ['prompt', { text: 'Fix it', kind: 'prompt', model: 'm', session: 's1', timeoutMs: 5n, profile: undefined, cwd: undefined }],
    ['prompt', { text: '/review', kind: 'slash-command', model: undefined, session: undefined, timeoutMs: undefined, profile: undefined, cwd: undefined }],
    ['prompt', { text: 'Eval', kind: 'prompt', model: undefined, session: undefined, timeoutMs: undefined, profile: 'specialist', cwd: 'wt' }],
    ['worktree-add', 'feature'],
    ['worktree-remove', 'wt'],
  ]);
  assert.throws(() => actions.prompt('x').profile(3), TypeError);
});

test('the 0.4.0 calls: a pre-patch worktree, MCP tools, snapshots, a timer', () => {
  const host = new FakeHost();
  host.answer = '.worktrees/prepatch-1';
  assert.equal(actions.worktreeAt('abc123', ['tests/test_a.py']), '.worktrees/prepatch-1');
  host.answer = { status: 'tool-error', answer: '{"isError": true}', durationMs: 7n };
  assert.deepEqual(actions.mcpCall('pw', 'shot', { url: 'http://x' }, { timeoutMs: 500 }), {
    status: 'tool-error',
    answer: { isError: true },
    durationMs: 7,
  });
  host.answer = '3';
  const snap = actions.Snapshot.take(['tests/test_a.py']);
  host.answer = ['tests/test_a.py'];
  assert.deepEqual(snap.restore(['tests/test_a.py']), ['tests/test_a.py']);
  snap.forget();
  assert.deepEqual(host.calls, [
    ['worktree-at', { revision: 'abc123', copy: ['tests/test_a.py'] }],
    ['mcp-call', { server: 'pw', tool: 'shot', arguments: '{"url":"http://x"}', timeoutMs: 500n }],
    ['snapshot', ['tests/test_a.py']],
    ['restore', { id: '3', paths: ['tests/test_a.py'] }],
    ['forget-snapshot', '3'],
  ]);
  assert.deepEqual(sdk.sleepUntil(1000, { n: 1 }, 'backoff'), {
    tag: 'sleep',
    val: { untilMs: 1000n, tick: '{"n":1}', reason: 'backoff' },
  });
  assert.throws(() => sdk.sleepUntil(-1, {}, 'x'), TypeError);
});

test('every action error kind becomes its exception', () => {
  const cases = [
    [{ tag: 'denied', val: 'add ["make"] to shell.allow' }, sdk.Denied],
    [{ tag: 'declined', val: 'the user said no' }, sdk.Declined],
    [{ tag: 'budget-exhausted', val: 'limits.actions_per_run (100)' }, sdk.BudgetExhausted],
    [{ tag: 'invalid', val: 'empty argv' }, sdk.Invalid],
    [{ tag: 'unavailable', val: 'no agent' }, sdk.Unavailable],
    [{ tag: 'outcome-unknown' }, sdk.OutcomeUnknown],
  ];
  for (const [error, cls] of cases) {
    const host = new FakeHost();
    host.answer = { error };
    for (const attempt of [() => actions.exec(['make']).run(), () => actions.prompt('hi').send(), () => actions.script('ls')]) {
      let caught;
      try {
        attempt();
      } catch (e) {
        caught = e;
      }
      assert.ok(caught instanceof cls && caught instanceof sdk.ActionError && caught instanceof sdk.PolicyError, `${error.tag}: ${caught}`);
      assert.equal(caught.kind, error.tag);
      assert.equal(caught.message, error.val ?? '');
      assert.ok(caught.describe().startsWith(error.tag.replace('-', ' ')), caught.describe());
    }
  }
  assert.equal(new sdk.Denied('add it to shell.allow').describe(), 'denied: add it to shell.allow');
  // Not an action-error: rethrown as it was.
  const host = new FakeHost();
  host.action = () => {
    throw new TypeError('lowering failed');
  };
  assert.throws(() => actions.exec(['x']).run(), TypeError);
});

test('state round-trips JSON values and checks their shape against the fallback', () => {
  const host = new FakeHost();
  sdk.state.set('progress', { config: { prompt: 'p' }, iteration: 1 });
  sdk.state.set('n', 3);
  assert.equal(host.state.get('progress'), '{"config":{"prompt":"p"},"iteration":1}');
  assert.deepEqual(sdk.state.get('progress'), { config: { prompt: 'p' }, iteration: 1 });
  assert.equal(sdk.state.get('n', 0), 3);
  assert.equal(sdk.state.get('missing'), undefined);
  assert.equal(sdk.state.get('missing', 7), 7);
  assert.deepEqual(sdk.state.keys(), ['n', 'progress']);
  assert.deepEqual(sdk.state.keys('p'), ['progress']);
  sdk.state.remove('n');
  assert.equal(sdk.state.get('n'), undefined);
  host.state.set('tries', '"three"');
  assert.throws(() => sdk.state.get('tries', 0), { name: 'PolicyError', message: 'state `tries` is not the expected shape: expected number, found string' });
  host.state.set('list', '{}');
  assert.throws(() => sdk.state.get('list', []), /expected array, found object/);
  assert.throws(() => sdk.state.set('x', Number.NaN), { name: 'PolicyError', message: /state `x`: the value is not JSON/ });
  assert.throws(() => sdk.state.set('x', undefined), sdk.PolicyError);
  assert.throws(() => sdk.state.set('x', 1n), sdk.PolicyError);
  assert.equal(host.state.has('x'), false);
  host.stateLimit = 'state value of 70000 bytes is over limits.state_value_bytes (65536)';
  assert.throws(() => sdk.state.set('big', 'x'), { name: 'PolicyError', message: host.stateLimit });
});

test('log levels, progress and the workspace', () => {
  const host = new FakeHost();
  sdk.log.debug('d');
  sdk.log.info('i');
  sdk.log.warn('w');
  sdk.log.error('e');
  sdk.log.progress('step 2/3');
  assert.deepEqual(host.calls, [['log', 'debug', 'd'], ['log', 'info', 'i'], ['log', 'warn', 'w'], ['log', 'error', 'e'], ['progress', 'step 2/3']]);
  assert.equal(actions.workspace.read('README.md'), 'read me');
  assert.deepEqual(actions.workspace.listDir(), ['README.md']);
  assert.throws(() => actions.workspace.read('nope'), { name: 'WorkspaceError', message: '`nope` does not exist in the workspace' });
});

test('each decision is the contract\'s', () => {
  assert.deepEqual(sdk.wait(), { tag: 'pass' });
  assert.deepEqual(sdk.inject('go on'), { tag: 'inject', val: 'go on' });
  assert.deepEqual(sdk.block('no'), { tag: 'block', val: 'no' });
  assert.deepEqual(sdk.ask('which?'), { tag: 'ask', val: 'which?' });
  assert.deepEqual(sdk.escalate('stuck'), { tag: 'escalate', val: 'stuck' });
  assert.deepEqual(sdk.rewrite({ command: 'ls' }), { tag: 'rewrite', val: '{"command":"ls"}' });
  assert.deepEqual(sdk.done(true, 'green'), { tag: 'done', val: { success: true, summary: 'green', data: undefined } });
  assert.deepEqual(sdk.done(false, 'red', { tries: 3 }), { tag: 'done', val: { success: false, summary: 'red', data: '{"tries":3}' } });
  assert.throws(() => sdk.done(1, 'x'), /success must be true or false/);
  assert.throws(() => sdk.inject(undefined), /inject\(\.\.\.\) takes text/);
  assert.throws(() => sdk.done(true, 'x', Infinity), /not JSON/);
});

const origin = { agent: 'claude-code', event: 'Stop' };
const events = [
  { tag: 'start', val: '{"a":1}' },
  { tag: 'turn-complete', val: { sessionId: 's', response: 'r', index: 1, continuation: false, origin } },
  { tag: 'tool-call', val: { name: 'Bash', input: '{"command":"ls"}' } },
  { tag: 'tick', val: '{"t":1}' },
  { tag: 'user-input', val: 'yes' },
  { tag: 'custom', val: ['PostToolUse', '{}'] },
];

test('events are dispatched by kind, the rest wait, by class and by definePolicy', () => {
  const seen = [];
  class Mine extends sdk.Policy {
    name = 'p';
    description = 'test';
    onStart(input) {
      seen.push(['start', input]);
      return sdk.inject('started');
    }
    onTurnComplete(turn) {
      seen.push(['turn', turn.response, turn.origin.agent]);
      return sdk.done(true, 'ok');
    }
    onToolCall(call) {
      seen.push(['tool', call.name]);
      return sdk.block('no');
    }
    onCustom(name, payload) {
      seen.push(['custom', name, payload]);
      return sdk.wait();
    }
  }
  const policy = new Mine();
  const { handle, info } = policy; // called unbound, as an export may be
  assert.deepEqual(events.map((e) => handle(e).tag), ['inject', 'done', 'block', 'pass', 'pass', 'pass']);
  assert.deepEqual(seen, [['start', '{"a":1}'], ['turn', 'r', 'claude-code'], ['tool', 'Bash'], ['custom', 'PostToolUse', '{}']]);
  assert.deepEqual(info(), { name: 'p', version: '0.1.0', description: 'test' });

  const defined = sdk.definePolicy({
    name: 'd',
    version: '2.0.0',
    onTick(snapshot) {
      return sdk.escalate(snapshot);
    },
  });
  assert.deepEqual(defined.handle(events[3]), { tag: 'escalate', val: '{"t":1}' });
  assert.deepEqual(defined.handle(events[0]), { tag: 'pass' });
  assert.deepEqual(defined.info(), { name: 'd', version: '2.0.0', description: '' });
  assert.throws(() => sdk.definePolicy({ name: 'x', onTurn() {} }), /unknown key `onTurn`/);
});

test('a PolicyError or an ActionError fails the event with its message', () => {
  const policy = sdk.definePolicy({
    name: 'refuses',
    onStart() {
      throw new sdk.PolicyError('bad input: `prompt` is empty');
    },
    onTurnComplete() {
      actions.exec(['make', 'test']).run();
      return sdk.wait();
    },
    onTick() {
      throw new Error('oops');
    },
  });
  assert.throws(() => policy.handle(events[0]), (e) => e === 'bad input: `prompt` is empty');
  const host = new FakeHost();
  host.answer = { error: { tag: 'denied', val: 'add ["make", "test"] to shell.allow' } };
  assert.throws(() => policy.handle(events[1]), (e) => e === 'denied: add ["make", "test"] to shell.allow');
  // Anything else goes on to componentize.mjs's wrapper, which logs its stack.
  assert.throws(() => policy.handle(events[3]), { message: 'oops' });
});

test('a handler that returns no decision is named', () => {
  const policy = sdk.definePolicy({
    name: 'forgets',
    onStart() {
      sdk.inject('x');
    },
    onTick() {
      return { tag: 'bogus' };
    },
  });
  assert.throws(
    () => policy.handle(events[0]),
    (e) => typeof e === 'string' && e.startsWith('the handler of start returned undefined, not a decision: return wait(), inject(...)'),
  );
  assert.throws(() => policy.handle(events[3]), (e) => typeof e === 'string' && e.includes('returned {"tag":"bogus"}'));
});

test('a ComponentError is what the fake throws, as componentize-js does', () => {
  assert.equal(new ComponentError('x').payload, 'x');
});

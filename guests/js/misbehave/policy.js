// A JavaScript policy that misbehaves on request, for the tests of what the host
// does with a bad guest. The `start` input names the misdeed:
// {"op": "throw" | "throw-string" | "malformed" | "wrong-type" | "ok"}.
export const policy = {
  info() {
    return { name: 'misbehave-js', version: '0.1.0', description: 'Fails in the way its input asks' };
  },

  handle(event) {
    if (event.tag !== 'start') return { tag: 'pass' };
    const { op } = JSON.parse(event.val);
    switch (op) {
      case 'throw':
        throw new Error('js policy exploded on purpose');
      case 'throw-string':
        throw 'js policy refuses on purpose';
      case 'malformed':
        return { tag: 'bogus' };
      case 'wrong-type':
        return { tag: 'inject', val: 42 };
      default:
        return { tag: 'done', val: { success: true, summary: 'ok from js', data: undefined } };
    }
  },
};

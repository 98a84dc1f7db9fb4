// Module hooks for the SDK's native tests: `loopbox:policy/NAME@VERSION` (the
// componentize-js bindings, which exist only inside a component) resolve to
// fake/NAME.mjs, which forwards each call to the FakeHost the test installed.
export async function resolve(specifier, context, next) {
  const m = /^loopbox:policy\/([a-z-]+)@([0-9][0-9a-z.+-]*)$/.exec(specifier);
  if (m) {
    const url = new URL(`./fake/${m[1]}.mjs`, import.meta.url);
    url.searchParams.set('contract', m[2]);
    return { url: url.href, shortCircuit: true };
  }
  return next(specifier, context);
}

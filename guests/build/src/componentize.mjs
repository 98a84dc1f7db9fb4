// Turn one JavaScript module into a loopbox policy component with the
// componentize-js API (the `jco componentize` command fails on this toolchain;
// see shared/reference/toolchain.md). Run from the directory holding node_modules:
//   node --input-type=module -e "$THIS" -- SOURCE.js WIT_DIR WORLD OUT.wasm no-http|keep-http
//
// The component is built from a small entry module next to SOURCE that wraps the
// policy's `handle`: an Error it throws becomes the policy's `err` carrying the
// error's message (componentize-js would otherwise abort, since `err` is a
// string), and its stack goes to stderr, which loopbox puts in the run log.
// A TypeScript SOURCE (.ts, .mts) is first bundled with the esbuild installed
// beside componentize-js into one JavaScript module (esbuild strips the types
// without checking them; the `loopbox:policy/*` imports stay imports).
// HTTP support is left out unless asked for: a policy reaches the world only
// through loopbox's own imports, and loopbox refuses a component importing wasi:http.
import { componentize } from '@bytecodealliance/componentize-js';
import { rm, writeFile } from 'node:fs/promises';
import { basename, dirname, join, resolve } from 'node:path';

const [source, wit, world, out, http] = process.argv.slice(-5);
const dir = dirname(resolve(source));
const entry = join(dir, `.loopbox-entry-${process.pid}.js`);
const bundle = join(dir, `.loopbox-bundle-${process.pid}.js`);
const typescript = /\.m?ts$/.test(source);
await writeFile(entry, `import { policy as inner } from './${basename(source)}';
export const policy = {
  info: () => inner.info(),
  handle(event) {
    try {
      return inner.handle(event);
    } catch (e) {
      if (typeof e === 'string') throw e;
      if (e && e.stack) console.error(e.stack);
      throw String(e);
    }
  },
};
`);
try {
  if (typescript) {
    const esbuild = await import('esbuild');
    // The contract's imports (and WASI's) are the component's, not files to bundle;
    // one the policy does not use is dropped, so a `decider` build imports no `actions`.
    const contract = {
      name: 'loopbox-contract',
      setup(build) {
        build.onResolve({ filter: /^(loopbox|wasi):/ }, (args) => ({ path: args.path, external: true, sideEffects: false }));
      },
    };
    await esbuild.build({
      entryPoints: [entry],
      outfile: bundle,
      bundle: true,
      format: 'esm',
      platform: 'neutral',
      mainFields: ['module', 'main'],
      target: 'es2022',
      logLevel: 'warning',
      plugins: [contract],
    });
  }
  const { component } = await componentize({
    sourcePath: typescript ? bundle : entry,
    witPath: resolve(wit),
    worldName: world,
    disableFeatures: http === 'keep-http' ? [] : ['http', 'fetch-event'],
  });
  await writeFile(out, component);
  console.log(`built ${out} (${component.byteLength} bytes)`);
} finally {
  await rm(entry, { force: true });
  await rm(bundle, { force: true });
}

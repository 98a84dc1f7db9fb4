// Build one JavaScript policy into a component:
//   node build.mjs NAME WORLD OUT.wasm     (source: NAME/policy.js)
// Uses the componentize-js API (the `jco componentize` command fails on this
// toolchain; see shared/reference/toolchain.md). HTTP features are disabled: a
// policy reaches the world only through loopbox's own imports.
import { componentize } from '@bytecodealliance/componentize-js';
import { writeFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { dirname, join, resolve } from 'node:path';

const [name, world, out] = process.argv.slice(2);
if (!name || !world || !out) {
  console.error('usage: node build.mjs NAME WORLD OUT.wasm');
  process.exit(2);
}
const here = dirname(fileURLToPath(import.meta.url));
const { component } = await componentize({
  sourcePath: join(here, name, 'policy.js'),
  witPath: resolve(here, '../../wit'),
  worldName: world,
  disableFeatures: ['http', 'fetch-event'],
});
await writeFile(out, component);
console.log(`built ${out} (${component.byteLength} bytes)`);

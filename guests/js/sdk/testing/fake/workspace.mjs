import { ComponentError } from '../fake-host.mjs';
const h = () => globalThis.loopboxFakeHost;
globalThis.loopboxImportedContracts = [...(globalThis.loopboxImportedContracts ?? []), new URL(import.meta.url).searchParams.get('contract')];
export function read(path) {
  if (!(path in h().files)) throw new ComponentError(`\`${path}\` does not exist in the workspace`);
  return h().files[path];
}
export const listDir = (dir) => Object.keys(h().files).sort();

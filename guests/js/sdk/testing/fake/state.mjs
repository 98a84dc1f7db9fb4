import { ComponentError } from '../fake-host.mjs';
const h = () => globalThis.loopboxFakeHost;
globalThis.loopboxImportedContracts = [...(globalThis.loopboxImportedContracts ?? []), new URL(import.meta.url).searchParams.get('contract')];
export const get = (key) => h().state.get(key);
export function set(key, value) {
  JSON.parse(value); // the host refuses what does not parse
  if (h().stateLimit) throw new ComponentError(h().stateLimit);
  h().state.set(key, value);
}
export const remove = (key) => void h().state.delete(key);
export const keys = (prefix) => [...h().state.keys()].filter((k) => k.startsWith(prefix)).sort();

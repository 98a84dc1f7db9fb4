const h = () => globalThis.loopboxFakeHost;
globalThis.loopboxImportedContracts = [...(globalThis.loopboxImportedContracts ?? []), new URL(import.meta.url).searchParams.get('contract')];
export const write = (level, message) => void h().calls.push(['log', level, message]);
export const progress = (message) => void h().calls.push(['progress', message]);

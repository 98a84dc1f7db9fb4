const h = () => globalThis.loopboxFakeHost;
globalThis.loopboxImportedContracts = [...(globalThis.loopboxImportedContracts ?? []), new URL(import.meta.url).searchParams.get('contract')];
export const shell = (req) => h().action('shell', req);
export const prompt = (req) => h().action('prompt', req);

const h = () => globalThis.loopboxFakeHost;
globalThis.loopboxImportedContracts = [...(globalThis.loopboxImportedContracts ?? []), new URL(import.meta.url).searchParams.get('contract')];
export const shell = (req) => h().action('shell', req);
export const prompt = (req) => h().action('prompt', req);
export const worktreeAdd = (branch) => h().action('worktree-add', branch);
export const worktreeRemove = (path) => void h().action('worktree-remove', path);

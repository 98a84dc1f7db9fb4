// A tool-call gate in JavaScript: block `rm -rf`-style shell commands the agent
// is about to run (in any flag order, through sudo, or inside a chain), and let
// everything else through. Run it as a Claude Code PreToolUse hook:
//   loopbox hook install claude-code --policy tool-gate.wasm --event PreToolUse --matcher Bash

// Split a shell command line into simple commands at ; & | && || and newlines.
function simpleCommands(line) {
  return line
    .split(/&&|\|\||[;&|\n]/)
    .map((c) => c.trim().split(/\s+/).filter(Boolean))
    .filter((words) => words.length > 0);
}

// Why `words` is a recursive forced delete, or null.
function recursiveForce(words) {
  let i = 0;
  // Skip environment assignments and privilege wrappers.
  while (i < words.length && (/^[A-Za-z_][A-Za-z0-9_]*=/.test(words[i]) || ['sudo', 'doas', 'command', 'env', 'nice'].includes(words[i]))) i++;
  const program = (words[i] ?? '').split('/').pop();
  if (program !== 'rm') return null;
  let recursive = false;
  let force = false;
  for (const w of words.slice(i + 1)) {
    if (w === '--') break;
    if (w === '--recursive') recursive = true;
    else if (w === '--force') force = true;
    else if (/^-[A-Za-z]+$/.test(w)) {
      recursive ||= /[rR]/.test(w);
      force ||= w.includes('f');
    }
  }
  return recursive && force ? words.join(' ') : null;
}

export const policy = {
  info() {
    return { name: 'tool-gate', version: '0.1.0', description: 'Block rm -rf style shell commands; pass every other tool call' };
  },

  handle(event) {
    if (event.tag !== 'tool-call' || event.val.name !== 'Bash') return { tag: 'pass' };
    let input;
    try {
      input = JSON.parse(event.val.input);
    } catch (e) {
      throw `tool-gate: the Bash tool input is not JSON: ${e.message}`;
    }
    const command = typeof input.command === 'string' ? input.command : '';
    for (const words of simpleCommands(command)) {
      const hit = recursiveForce(words);
      if (hit) return { tag: 'block', val: `loopbox tool-gate: refusing a recursive forced delete (\`${hit}\`); remove files one by one or ask the user` };
    }
    return { tag: 'pass' };
  },
};

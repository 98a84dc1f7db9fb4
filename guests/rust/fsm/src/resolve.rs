//! Putting a loop together before it is read, as little-loops does: a
//! `from:` parent merged under the child, `flow:` shorthand expanded into
//! states, and `fragment:` references filled in from the loop's own
//! `fragments:` and those of the libraries it imports. All of it works on
//! YAML trees whose lines carry their file, so later problems name the file
//! each part was written in.

use crate::load::{Files, resolve_path};
use crate::problem::Problems;
use crate::yaml::{self, Key, Node, Value};

/// How many parents a `from:` chain may have.
pub const MAX_PARENTS: usize = 16;
/// How many values fragment expansion may add to a loop, all uses together:
/// a large fragment used by many states would otherwise multiply.
pub const MAX_EXPANDED_NODES: usize = 4 * yaml::MAX_NODES;
/// How much text fragment expansion may add to a loop, all uses together: one
/// large string in a fragment is a single value, so values alone do not bound it.
pub const MAX_EXPANDED_BYTES: usize = yaml::MAX_EXPANDED_BYTES;

/// `base` with `over` on top: mappings merge key by key, anything else in
/// `over` replaces what `base` has (little-loops' `_deep_merge`).
pub fn deep_merge(base: &Node, over: &Node) -> Node {
    let (Value::Map(b), Value::Map(o)) = (&base.value, &over.value) else {
        return over.clone();
    };
    let mut out = b.clone();
    for (k, v) in o {
        match out.iter_mut().find(|(bk, _)| bk.name == k.name) {
            Some((bk, bv)) => {
                *bv = deep_merge(bv, v);
                bk.line = k.line;
            }
            None => out.push((k.clone(), v.clone())),
        }
    }
    Node {
        value: Value::Map(out),
        line: over.line,
    }
}

/// Remove `name` from a mapping node, returning its value.
pub fn take(node: &mut Node, name: &str) -> Option<(Key, Node)> {
    let Value::Map(entries) = &mut node.value else {
        return None;
    };
    let i = entries.iter().position(|(k, _)| k.name == name)?;
    Some(entries.remove(i))
}

/// Set `name` in a mapping node (replacing any value it had).
pub fn put(node: &mut Node, key: Key, value: Node) {
    if let Value::Map(entries) = &mut node.value {
        match entries.iter_mut().find(|(k, _)| k.name == key.name) {
            Some(slot) => *slot = (key, value),
            None => entries.push((key, value)),
        }
    }
}

/// Where `from: NAME` or `loop: NAME` finds its file. little-loops looks in
/// its loops directory, then among its built-in loops; loopbox looks in the
/// directory of the loop that names it, then in each directory above it up
/// to the workspace root (so `loop: oracles/check` from `loops/oracles/a.yaml`
/// finds `loops/oracles/check.yaml`). In each, `NAME` itself when it names a
/// YAML file, else `NAME.fsm.yaml`, then `NAME.yaml`.
pub fn loop_candidates(from_file: &str, name: &str) -> Vec<String> {
    let names: Vec<String> = if name.ends_with(".yaml") || name.ends_with(".yml") {
        vec![name.to_string()]
    } else {
        vec![format!("{name}.fsm.yaml"), format!("{name}.yaml")]
    };
    candidates(from_file, &names)
}

/// Each of `names` in the directory of `from_file`, then in each directory
/// above it up to the workspace root: normalized, without repeats, and
/// without those that would leave the workspace.
pub fn candidates(from_file: &str, names: &[String]) -> Vec<String> {
    let mut dirs: Vec<&str> = Vec::new();
    let mut dir = from_file;
    while let Some(i) = dir.rfind('/') {
        dir = &dir[..i];
        dirs.push(dir);
    }
    dirs.push("");
    let mut out = Vec::new();
    for d in dirs {
        for n in names {
            let joined = if d.is_empty() {
                n.clone()
            } else {
                format!("{d}/{n}")
            };
            if let Some(path) = resolve_path("x", &joined)
                && !out.contains(&path)
            {
                out.push(path);
            }
        }
    }
    out
}

/// Read the first candidate that exists: its path and text.
pub fn read_first(
    files: &mut dyn Files,
    candidates: &[String],
) -> Result<(String, String), String> {
    let mut last = String::from("the name leaves the workspace");
    let mut refused = None;
    for c in candidates {
        match files.read(c) {
            Ok(text) => return Ok((c.clone(), text)),
            // A file that is there but refused says more than the names that are not.
            Err(e) if !is_missing(&e) => refused = refused.or(Some(format!("{c}: {e}"))),
            Err(e) => last = format!("{c}: {e}"),
        }
    }
    Err(refused.unwrap_or(last))
}

/// Whether a workspace read failed only because nothing has that name.
pub fn is_missing(error: &str) -> bool {
    error.contains("does not exist")
}

/// Parse a file of the load, its lines tagged with its index.
pub fn parse_file(path: &str, text: &str, p: &mut Problems) -> Option<Node> {
    let index = p.add_file(path);
    match yaml::parse(text) {
        Ok(mut node) => {
            yaml::tag(&mut node, index);
            Some(node)
        }
        Err(e) => {
            p.at(
                e.line | (index << crate::problem::LINE_BITS),
                format!("not valid YAML: {}", e.message),
            );
            None
        }
    }
}

/// Merge the `from:` chain: the parent's fields under the child's, the
/// parent's own parent under it, and so on.
pub fn inherit(mut root: Node, path: &str, files: &mut dyn Files, p: &mut Problems) -> Node {
    let mut chain = vec![path.to_string()];
    let mut child_path = path.to_string();
    let mut layers: Vec<Node> = Vec::new();
    while let Some((key, from)) = take(&mut root, "from") {
        let Some(name) = from.as_str().map(str::to_string) else {
            p.at(
                from.line,
                format!("`from` must name a parent loop, not {}", from.kind()),
            );
            break;
        };
        if chain.len() > MAX_PARENTS {
            p.at(
                key.line,
                format!("`from` chains more than {MAX_PARENTS} parents"),
            );
            break;
        }
        let parent = match read_first(files, &loop_candidates(&child_path, &name)) {
            Ok(found) => found,
            Err(e) => {
                p.at(
                    from.line,
                    format!("`from: {name}`: cannot read the parent loop ({e})"),
                );
                break;
            }
        };
        if chain.contains(&parent.0) {
            p.at(
                from.line,
                format!(
                    "`from` makes a cycle: {} -> {}",
                    chain.join(" -> "),
                    parent.0
                ),
            );
            break;
        }
        chain.push(parent.0.clone());
        let Some(parent_root) = parse_file(&parent.0, &parent.1, p) else {
            break;
        };
        if parent_root.as_map().is_none() {
            p.at(
                from.line,
                format!("`from: {name}`: {} is not a mapping", parent.0),
            );
            break;
        }
        layers.push(root);
        root = parent_root;
        child_path = parent.0;
    }
    // `root` is now the farthest parent; lay each child over it, nearest last.
    while let Some(child) = layers.pop() {
        root = deep_merge(&root, &child);
    }
    root
}

/// `flow: [a, b?yes:no, c]` as states: each goes to the next, a ternary
/// entry routes `yes`/`no`, the last is terminal; `state_defs` fill them in.
pub fn expand_flow(root: &mut Node, p: &mut Problems) {
    let Some((key, flow)) = take(root, "flow") else {
        return;
    };
    let defs = take(root, "state_defs").map(|(_, v)| v);
    let Value::Seq(items) = &flow.value else {
        p.at(
            flow.line,
            format!("`flow` must be a list of state names, not {}", flow.kind()),
        );
        return;
    };
    if items.is_empty() {
        p.at(flow.line, "`flow` must name at least one state");
        return;
    }
    // (state, its ternary `yes`/`no` targets, line)
    type Entry = (String, Option<(String, String)>, u32);
    let mut entries: Vec<Entry> = Vec::new();
    for item in items {
        let Some(text) = item.as_str() else {
            p.at(
                item.line,
                format!("a `flow` entry must be a state name, not {}", item.kind()),
            );
            return;
        };
        match text.split_once('?') {
            None => entries.push((text.to_string(), None, item.line)),
            Some((name, targets)) => match targets.split_once(':') {
                Some((yes, no)) if !yes.is_empty() && !no.is_empty() => {
                    entries.push((name.to_string(), Some((yes.into(), no.into())), item.line))
                }
                _ => {
                    p.at(
                        item.line,
                        format!("`flow` entry `{text}` must be `name?yes_state:no_state`"),
                    );
                    return;
                }
            },
        }
    }
    let text = |s: &str, line: u32| Node {
        value: Value::Str(s.to_string()),
        line,
    };
    let key_at = |name: &str, line: u32| Key {
        name: name.to_string(),
        line,
    };
    let mut states = Vec::new();
    for (i, (name, ternary, line)) in entries.iter().enumerate() {
        let mut fields = Vec::new();
        match ternary {
            Some((yes, no)) => {
                fields.push((key_at("on_yes", *line), text(yes, *line)));
                fields.push((key_at("on_no", *line), text(no, *line)));
            }
            None => {
                if let Some((next, _, _)) = entries.get(i + 1) {
                    fields.push((key_at("next", *line), text(next, *line)));
                }
            }
        }
        if i + 1 == entries.len() {
            fields.push((
                key_at("terminal", *line),
                Node {
                    value: Value::Bool(true),
                    line: *line,
                },
            ));
        }
        let mut state = Node {
            value: Value::Map(fields),
            line: *line,
        };
        if let Some(def) = defs.as_ref().and_then(|d| yaml::get(d, name)) {
            state = deep_merge(&state, def);
        }
        states.push((key_at(name, *line), state));
    }
    put(
        root,
        Key {
            name: "states".into(),
            line: key.line,
        },
        Node {
            value: Value::Map(states),
            line: flow.line,
        },
    );
}

/// Named partial states, by name.
pub type Fragments = Vec<(String, Node)>;

/// Add a `fragments:` mapping's entries to `into` (later ones win).
pub fn collect_fragments(node: Option<&Node>, into: &mut Fragments, p: &mut Problems) {
    let Some(node) = node else { return };
    let Some(entries) = node.as_map() else {
        p.at(
            node.line,
            format!(
                "`fragments` must map names to partial states, not {}",
                node.kind()
            ),
        );
        return;
    };
    for (k, v) in entries {
        into.retain(|(n, _)| *n != k.name);
        into.push((k.name.clone(), v.clone()));
    }
}

/// Fill in each state's `fragment:`: the fragment under the state's own
/// fields. A fragment's `with:` bindings and `parameters:` declarations are
/// kept as `fragment_bindings` / `fragment_parameters` for the state reader.
pub fn expand_fragments(root: &mut Node, fragments: &Fragments, p: &mut Problems) {
    let Value::Map(entries) = &mut root.value else {
        return;
    };
    let Some((_, states)) = entries.iter_mut().find(|(k, _)| k.name == "states") else {
        return;
    };
    let Value::Map(states) = &mut states.value else {
        return;
    };
    let mut added = 0usize;
    let mut added_bytes = 0usize;
    for (state_key, state) in states.iter_mut() {
        let Some((frag_key, name)) = take(state, "fragment") else {
            continue;
        };
        let Some(name) = name.as_str().map(str::to_string) else {
            p.at(
                name.line,
                format!(
                    "state `{}`: `fragment` must name a fragment",
                    state_key.name
                ),
            );
            continue;
        };
        let Some((_, fragment)) = fragments.iter().find(|(n, _)| *n == name) else {
            let mut names: Vec<&str> = fragments.iter().map(|(n, _)| n.as_str()).collect();
            names.sort();
            p.at(
                frag_key.line,
                format!(
                    "state `{}`: fragment `{name}` is not defined (fragments: {}); `import` the library that has it",
                    state_key.name,
                    if names.is_empty() { "none".to_string() } else { names.join(", ") }
                ),
            );
            continue;
        };
        added += yaml::size(fragment);
        if added > MAX_EXPANDED_NODES {
            p.at(
                frag_key.line,
                format!(
                    "state `{}`: fragments expand to more than {MAX_EXPANDED_NODES} values in all",
                    state_key.name
                ),
            );
            return;
        }
        added_bytes = added_bytes.saturating_add(yaml::text_bytes(fragment));
        if added_bytes > MAX_EXPANDED_BYTES {
            p.at(
                frag_key.line,
                format!(
                    "state `{}`: fragments expand this loop past {} MiB of text in all (the limit for a loop file); each `fragment:` use copies the whole fragment, so keep large text out of fragments used by many states",
                    state_key.name,
                    MAX_EXPANDED_BYTES >> 20
                ),
            );
            return;
        }
        let mut base = fragment.clone();
        take(&mut base, "description");
        let params = take(&mut base, "parameters");
        let mut merged = deep_merge(&base, state);
        merged.line = state.line;
        let bindings = take(&mut merged, "with");
        let empty = |line| Node {
            value: Value::Map(Vec::new()),
            line,
        };
        put(
            &mut merged,
            Key {
                name: "fragment_bindings".into(),
                line: frag_key.line,
            },
            bindings
                .map(|(_, v)| v)
                .unwrap_or_else(|| empty(frag_key.line)),
        );
        if let Some((k, v)) = params {
            put(
                &mut merged,
                Key {
                    name: "fragment_parameters".into(),
                    line: k.line,
                },
                v,
            );
        }
        put(
            &mut merged,
            Key {
                name: "fragment_name".into(),
                line: frag_key.line,
            },
            Node {
                value: Value::Str(name),
                line: frag_key.line,
            },
        );
        *state = merged;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(text: &str) -> Node {
        yaml::parse(text).unwrap()
    }

    #[test]
    fn deep_merge_lets_the_child_win_at_every_level() {
        let base = node("a: 1\nm:\n  x: 1\n  y: 2\nlist: [1, 2]\n");
        let over = node("m:\n  y: 3\nlist: [9]\nb: 2\n");
        let merged = deep_merge(&base, &over).to_json();
        assert_eq!(
            merged,
            serde_json::json!({"a": 1, "m": {"x": 1, "y": 3}, "list": [9], "b": 2})
        );
    }

    #[test]
    fn flow_becomes_a_chain_of_states() {
        let mut root = node(
            "name: f\ninitial: a\nflow: [a, 'b?c:a', c]\nstate_defs:\n  a:\n    action: echo a\n",
        );
        let mut p = Problems::new("f.yaml");
        expand_flow(&mut root, &mut p);
        assert!(p.list.is_empty(), "{:?}", p.list);
        assert_eq!(
            yaml::get(&root, "states").unwrap().to_json(),
            serde_json::json!({
                "a": {"next": "b", "action": "echo a"},
                "b": {"on_yes": "c", "on_no": "a"},
                "c": {"terminal": true},
            })
        );
    }
}

//! Declared parameters (a loop's, for sub-loop calls, or a fragment's) and
//! how bound values meet them.

use crate::problem::Problems;
use crate::yaml::Node;

use super::fields::{Fields, unknown};

/// A declared parameter (a loop's, for sub-loop calls, or a fragment's).
#[derive(Debug, Clone, PartialEq)]
pub struct Param {
    pub name: String,
    pub required: bool,
    pub default: Option<serde_json::Value>,
}

impl Param {
    /// Fill in the defaults of `params` that `values` does not bind; the
    /// first required one still unbound is the error.
    pub fn bind<'a>(
        params: &'a [Param],
        values: &mut serde_json::Map<String, serde_json::Value>,
    ) -> Result<(), &'a Param> {
        for p in params {
            if let (false, Some(d)) = (values.contains_key(&p.name), &p.default) {
                values.insert(p.name.clone(), d.clone());
            }
        }
        match params
            .iter()
            .find(|p| p.required && !values.contains_key(&p.name))
        {
            Some(missing) => Err(missing),
            None => Ok(()),
        }
    }
}

/// `parameters: {NAME: {type, required, default, description}}`.
pub(super) fn read_params(node: &Node, what: &str, p: &mut Problems) -> Vec<Param> {
    let Some(entries) = node.as_map() else {
        p.at(
            node.line,
            format!(
                "{what}`parameters` must map names to their specs, not {}",
                node.kind()
            ),
        );
        return Vec::new();
    };
    let mut out = Vec::new();
    for (k, v) in entries {
        let Some(fields) = v.as_fields() else {
            p.at(
                v.line,
                format!(
                    "{what}parameter `{}` must be a mapping (type, required, default)",
                    k.name
                ),
            );
            continue;
        };
        let mut f = Fields::new(fields);
        let required = f.boolean(p, "required", what).unwrap_or(false);
        let default = f.take("default").map(Node::to_json);
        let _ = f.take("type");
        let _ = f.take("description");
        for (key, _) in f.unused() {
            unknown(
                p,
                key,
                &format!("{what}parameter `{}`: ", k.name),
                &[],
                &["type", "required", "default", "description"],
            );
        }
        out.push(Param {
            name: k.name.clone(),
            required,
            default,
        });
    }
    out
}

//! `tamper_guard` and `prepatch_check`, on a loop (the default) or a state
//! (its override). little-loops keeps any text and warns at validation on
//! an unknown value, which then guards nothing (`_validate_tamper_guard`,
//! `_validate_prepatch_check`); so does loopbox, with a note.

use crate::problem::Problems;

use super::fields::{Fields, value_line};

/// The two guards' values as written; [`crate::tamper::effective`] and
/// [`crate::prepatch::effective`] resolve a state's against its loop's.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Guards {
    pub tamper_guard: Option<String>,
    pub prepatch_check: Option<String>,
}

pub(super) fn read_guards(f: &mut Fields, p: &mut Problems, what: &str) -> Guards {
    let tamper_line = value_line(f.entries, "tamper_guard").unwrap_or(0);
    let prepatch_line = value_line(f.entries, "prepatch_check").unwrap_or(0);
    let tamper_guard = f.string(p, "tamper_guard", what);
    match tamper_guard.as_deref() {
        None | Some("fail" | "allow" | "revert") => {}
        Some(other) => p.note(
            tamper_line,
            format!("{what}`tamper_guard: {other}` is not one of allow, fail, revert: the state runs unguarded, as in little-loops"),
        ),
    }
    let prepatch_check = f.string(p, "prepatch_check", what);
    if let Some(other) = prepatch_check
        .as_deref()
        .filter(|v| !matches!(*v, "fail" | "warn" | "allow"))
    {
        p.note(
            prepatch_line,
            format!("{what}`prepatch_check: {other}` is not one of allow, fail, warn: the state runs unchecked, as in little-loops"),
        );
    }
    Guards {
        tamper_guard,
        prepatch_check,
    }
}

#[cfg(test)]
mod tests {
    struct NoFiles;
    impl crate::Files for NoFiles {
        fn read(&mut self, _: &str) -> Result<String, String> {
            Err("no files".into())
        }
    }

    fn load(loop_level: &str, state_level: &str) -> Result<crate::spec::Loop, String> {
        let yaml = format!(
            "name: g\ninitial: a\n{loop_level}states:\n  a:\n    action: echo\n{state_level}    next: done\n  done:\n    terminal: true\n"
        );
        crate::load("g.yaml", &yaml, &mut NoFiles).map_err(|p| crate::render(&p))
    }

    #[test]
    fn fail_allow_and_revert_load_and_unknown_values_are_noted() {
        let lp = load("tamper_guard: fail\n", "    prepatch_check: warn\n").unwrap();
        assert_eq!(lp.guards.tamper_guard.as_deref(), Some("fail"));
        assert_eq!(lp.states[0].guards.prepatch_check.as_deref(), Some("warn"));
        let lp = load("", "    tamper_guard: revert\n").unwrap();
        assert_eq!(lp.states[0].guards.tamper_guard.as_deref(), Some("revert"));
        let lp = load("tamper_guard: sometimes\nprepatch_check: never\n", "").unwrap();
        let notes: Vec<String> = lp.notes.iter().map(|n| n.to_string()).collect();
        assert!(
            notes
                .iter()
                .any(|n| n.contains("`tamper_guard: sometimes` is not one of")),
            "{notes:?}"
        );
        assert!(notes.iter().any(|n| n.contains("`prepatch_check: never`")));
    }
}

//! `worktree:` sub-loops: the child's actions run in the worktree the host
//! made, which goes when the child ends, as little-loops' `_run_sub_loop` does.

use super::*;

/// The scripted world, with worktrees: each action is kept with the directory
/// it ran in; the branch `missing` cannot be checked out.
#[derive(Default)]
struct Trees {
    w: Scripted,
    cwd: Option<String>,
    ran_in: Vec<Option<String>>,
    calls: Vec<String>,
}

impl World for Trees {
    fn act(&mut self, req: Request) -> Result<Out, String> {
        self.ran_in.push(self.cwd.clone());
        self.w.act(req)
    }
    fn log(&mut self, level: Level, message: &str) {
        self.w.log(level, message)
    }
    fn progress(&mut self, message: &str) {
        self.w.progress(message)
    }
    fn now_ms(&mut self) -> u64 {
        self.w.now_ms()
    }
    fn read(&mut self, path: &str) -> Result<String, String> {
        self.w.read(path)
    }
    fn worktree_add(&mut self, branch: &str) -> Result<String, String> {
        self.calls.push(format!("add {branch}"));
        if branch == "missing" {
            return Err("git could not check out branch `missing`".into());
        }
        Ok(format!(".worktrees/t-subloop-{branch}"))
    }
    fn worktree_remove(&mut self, path: &str) -> Result<(), String> {
        self.calls.push(format!("remove {path}"));
        Ok(())
    }
    fn set_cwd(&mut self, cwd: Option<String>) -> Option<String> {
        std::mem::replace(&mut self.cwd, cwd)
    }
}

const PARENT: &str = "name: parent\ninitial: pick\nstates:\n  pick:\n    action: echo feat\n    capture: branch\n    next: sub\n  sub:\n    loop: child\n    worktree: '${captured.branch.output}'\n    on_yes: after\n    on_no: after\n    on_error: broke\n  after:\n    action: cat where\n    next: done\n  broke:\n    terminal: true\n  done:\n    terminal: true\n";
const CHILD: &str = "name: child\ninitial: work\nstates:\n  work:\n    action: pwd > where\n    next: end\n  end:\n    terminal: true\n";

fn parent(child: &str) -> Loop {
    lp_with("parent.yaml", PARENT, &[("child.yaml", child)])
}

fn trees(replies: Vec<Result<Out, String>>) -> Trees {
    let mut t = Trees {
        w: Scripted::new(replies),
        ..Default::default()
    };
    t.w.files.insert("child.yaml".into(), CHILD.into());
    t
}

#[test]
fn the_child_runs_in_the_worktree_and_it_goes_after() {
    let mut t = trees(vec![exit(0, "feat\n"), exit(0, ""), exit(0, "")]);
    let end = run(&parent(CHILD), &Map::new(), &mut t);
    assert_eq!(
        end.path,
        ["pick", "sub", "after", "done"],
        "{}",
        end.summary
    );
    let wt = Some(".worktrees/t-subloop-feat".to_string());
    // Only the child's action runs in the worktree; the parent's before and after do not.
    assert_eq!(t.ran_in, [None, wt.clone(), None]);
    assert_eq!(t.calls, ["add feat", "remove .worktrees/t-subloop-feat"]);
    let logs = t.w.logs.join("\n");
    assert!(
        logs.contains(
            "sub_loop_worktree_attached: branch `feat`, path `.worktrees/t-subloop-feat`"
        ),
        "{logs}"
    );
    assert!(logs.contains("sub_loop_worktree_detached"), "{logs}");
}

#[test]
fn an_empty_branch_is_no_worktree_and_a_failed_add_takes_on_error() {
    let mut t = trees(vec![exit(0, "  \n"), exit(0, ""), exit(0, "")]);
    let end = run(&parent(CHILD), &Map::new(), &mut t);
    assert_eq!(end.path, ["pick", "sub", "after", "done"]);
    assert!(t.calls.is_empty() && t.ran_in.iter().all(Option::is_none));

    let mut t = trees(vec![exit(0, "missing\n")]);
    let end = run(&parent(CHILD), &Map::new(), &mut t);
    assert_eq!(end.path, ["pick", "sub", "broke"], "{}", end.summary);
    assert_eq!(t.calls, ["add missing"]);
    assert!(t.w.logs.join("\n").contains("sub_loop_worktree_error"));
}

#[test]
fn the_worktree_goes_when_the_child_errs() {
    let mut t = trees(vec![exit(0, "feat\n"), Err("denied".into())]);
    t.w.files.insert(
        "child.yaml".into(),
        "name: child\ninitial: work\nstates:\n  work:\n    action: pwd > where\n    next: end\n  end:\n    terminal: true\n".into(),
    );
    let end = run(&parent(CHILD), &Map::new(), &mut t);
    assert_eq!(t.calls.len(), 2, "{:?} {}", t.calls, end.summary);
    assert_eq!(t.cwd, None, "the parent's directory is restored");
}

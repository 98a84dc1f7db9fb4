//! Issue 45, item 11: loops are runs like any other. A YAML loop of a
//! tenant's workspace is listed and shown by its loop's name (not
//! `builtin:fsm`), with its path of states and the state it is in, and its
//! journal as state, command and outcome; the dashboard's form lists the
//! workspace's loop files (none outside it) and starts one through the API;
//! the navigation's approval count is on every page, hidden at zero, for the
//! script to update. On the shared server's tenant `loops`, on each engine.

use std::sync::Once;

use serde_json::{Value, json};

use super::{http, shared};
use crate::common::BIN;

/// A loop the tenant's grants allow (`echo`, `cat`, `sleep`): it waits
/// `seconds` in `wait`, then takes the `no` route out of `check`.
pub const TIDY: &str = "name: tidy\ninitial: look\nmax_steps: 6\ncontext:\n  seconds: \"0\"\nstates:\n  look:\n    exec: [echo, looking]\n    next: wait\n  wait:\n    exec: [sleep, \"${context.seconds}\"]\n    next: check\n  check:\n    exec: [cat, nothing.txt]\n    on_yes: done\n    on_no: fixed\n  fixed:\n    exec: [echo, fixed]\n    next: done\n  done:\n    terminal: true\n";

/// The tenant's files: `proj/loops/tidy.yaml`; a YAML file that is no loop;
/// and links to a loop outside the workspace (another tenant's root).
/// The same in `webloop`, the browser's (web.rs).
pub fn files() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        for tenant in ["loops", "webloop"] {
            files_of(tenant);
        }
    });
}

fn files_of(tenant: &str) {
    let srv = shared();
    let proj = srv.root(tenant).join("proj");
    std::fs::create_dir_all(proj.join("loops")).unwrap();
    std::fs::write(proj.join("loops/tidy.yaml"), TIDY).unwrap();
    std::fs::write(proj.join("ci.yaml"), "on: push\njobs: {}\n").unwrap();
    let theirs = srv.root("beta").join("proj/theirs.yaml");
    std::fs::write(&theirs, TIDY.replace("tidy", "theirs")).unwrap();
    std::os::unix::fs::symlink(&theirs, proj.join("outside.yaml")).unwrap();
    std::os::unix::fs::symlink(srv.root("beta").join("proj"), proj.join("beta-link")).unwrap();
}

fn start(body: Value) -> (u16, Value) {
    files();
    let srv = shared();
    let r = srv.post("/api/v1/runs", srv.token("loops", "operator"), body);
    (
        r.status,
        serde_json::from_str(&r.body).unwrap_or(Value::Null),
    )
}

#[test]
fn a_loop_is_listed_and_shown_by_its_name_with_its_path_state_and_commands() {
    let srv = shared();
    let (status, v) =
        start(json!({"loop": "loops/tidy.yaml", "workspace": "proj", "input": {"seconds": "2"}}));
    assert_eq!(status, 201, "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    // While it waits in `wait`, the run says so.
    // (The state can show a moment before its command's journal row.)
    let running = srv.wait_run("loops", &id, |v| {
        v["loop"]["state"] == "wait"
            && v["journal"]
                .as_array()
                .is_some_and(|j| j.iter().any(|j| j["state"] == "wait"))
    });
    assert_eq!(
        running["loop"]["path"],
        json!(["look", "wait"]),
        "{running:#}"
    );
    assert_eq!(running["loop"]["ended"], false);
    let waiting = running["journal"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["state"] == "wait")
        .cloned()
        .unwrap_or_default();
    assert_eq!(waiting["command"], "sleep 2", "{running:#}");
    let v = srv.wait_final("loops", &id);
    assert_eq!(v["status"], "done", "{v:#}");
    assert_eq!(
        (&v["policy"], &v["policy_name"]),
        (&json!("builtin:fsm"), &json!("tidy"))
    );
    assert_eq!(v["loop"]["name"], "tidy");
    assert_eq!(v["loop"]["file"], "loops/tidy.yaml");
    assert_eq!(
        v["loop"]["path"],
        json!(["look", "wait", "check", "fixed", "done"])
    );
    assert_eq!(
        (&v["loop"]["state"], &v["loop"]["ended"]),
        (&json!("done"), &json!(true))
    );
    // Each action: the state it ran in, its command, its exit, where the loop went.
    let shown: Vec<(Value, Value, Value, Value)> = v["journal"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| {
            (
                j["state"].clone(),
                j["command"].clone(),
                j["exit_code"].clone(),
                j["then"].clone(),
            )
        })
        .collect();
    assert_eq!(
        shown,
        vec![
            (
                json!("look"),
                json!("echo looking"),
                json!(0),
                json!("wait")
            ),
            (json!("wait"), json!("sleep 2"), json!(0), json!("check")),
            (
                json!("check"),
                json!("cat nothing.txt"),
                json!(1),
                json!("fixed")
            ),
            (json!("fixed"), json!("echo fixed"), json!(0), json!("done")),
        ]
    );
    let verdicts: Vec<&Value> = v["journal"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| &j["verdict"])
        .collect();
    assert_eq!(
        verdicts,
        [
            &json!("next"),
            &json!("next"),
            &json!("no (exit 1)"),
            &json!("next")
        ]
    );
    // The list names it, and finds it by its name.
    let list = srv
        .get("/api/v1/runs?policy=tidy", srv.token("loops", "viewer"))
        .json();
    let row = list["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == id.as_str())
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        (&row["policy_name"], &row["loop"]),
        (&json!("tidy"), &json!("tidy")),
        "{list:#}"
    );
    // The run page: the loop's name, its path, its commands as text (no request JSON).
    let page = page(&format!("/runs/{id}"));
    assert!(
        page.contains("<title>tidy · run · loopbox</title>"),
        "{page}"
    );
    assert!(page.contains("aria-label=\"path of states\""), "{page}");
    assert!(
        page.contains("<code class=\"wrap\">cat nothing.txt</code>"),
        "{page}"
    );
    assert!(!page.contains("&quot;exec&quot;"), "{page}");
    assert!(
        page.contains("loop loops/tidy.yaml · input"),
        "the start event: {page}"
    );
}

#[test]
fn a_loop_outside_the_workspace_is_refused_whatever_the_way_there() {
    for (file, why) in [
        ("../../beta/proj/theirs.yaml", "without `..`"),
        ("loops/../../outside.yaml", "without `..`"),
        ("outside.yaml", "cannot be read"),
        ("beta-link/theirs.yaml", "cannot be read"),
        ("/etc/passwd.yaml", "cannot be read"),
        ("loops", "ends in .yaml or .yml"),
        ("missing.yaml", "cannot be read"),
        ("ci.yaml", "problem"),
    ] {
        let (status, v) = start(json!({"loop": file, "workspace": "proj"}));
        assert_eq!(status, 400, "{file}: {v}");
        let e = v["error"].as_str().unwrap_or_default();
        assert!(e.contains(why), "{file}: {e}");
    }
}

/// A page of tenant `loops` as its operator sees it.
fn page(path: &str) -> String {
    let srv = shared();
    let auth = format!("Bearer {}", srv.token("loops", "operator"));
    let r = http(&srv.addr, "GET", path, &[("Authorization", &auth)], None);
    assert_eq!(r.status, 200, "{path}: {}", r.body);
    r.body
}

#[test]
fn the_start_form_lists_the_workspaces_loops_and_starts_one_through_the_api() {
    files();
    let srv = shared();
    // The first root by default; any workspace inside the tenant's roots.
    for (path, listed) in [
        ("/runs/new", "proj/loops/tidy.yaml"),
        ("/runs/new?workspace=proj", "loops/tidy.yaml"),
    ] {
        let form = page(path);
        assert!(
            form.contains(&format!("<option value=\"{listed}\">")),
            "{form}"
        );
        // Neither a YAML file that is no loop, nor a link out of the workspace.
        for absent in ["ci.yaml", "outside.yaml", "theirs.yaml"] {
            assert!(!form.contains(absent), "{absent} is listed: {form}");
        }
    }
    // Another workspace: only one inside the tenant's roots is looked into.
    let elsewhere = page("/runs/new?workspace=..%2Fbeta");
    assert!(
        elsewhere.contains("is not inside any of tenant"),
        "{elsewhere}"
    );
    assert!(!elsewhere.contains("theirs.yaml"), "{elsewhere}");
    // The form's post is the API's start.
    let auth = format!("Bearer {}", srv.token("loops", "operator"));
    let r = http(
        &srv.addr,
        "POST",
        "/runs",
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/x-www-form-urlencoded"),
        ],
        Some(b"workspace=proj&loop=loops%2Ftidy.yaml&input=%7B%7D"),
    );
    assert_eq!(r.status, 303, "{}", r.body);
    let id = r
        .header("location")
        .and_then(|l| l.strip_prefix("/runs/"))
        .and_then(|l| l.strip_suffix("?note=started"))
        .unwrap()
        .to_string();
    let v = srv.wait_final("loops", &id);
    assert_eq!(
        (&v["status"], &v["loop"]["name"]),
        (&json!("done"), &json!("tidy")),
        "{v:#}"
    );
    // And one outside the workspace is refused on the page, as by the API.
    let r = http(
        &srv.addr,
        "POST",
        "/runs",
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/x-www-form-urlencoded"),
        ],
        Some(b"workspace=proj&loop=outside.yaml&input=%7B%7D"),
    );
    assert_eq!(r.status, 400, "{}", r.body);
}

#[test]
fn the_navigations_approval_count_is_on_every_page_for_the_script_to_follow() {
    let srv = shared();
    // None pending: there, hidden.
    let runs = page("/runs/new");
    assert!(
        runs.contains(
            "<span class=\"count\" id=\"pending-count\" title=\"pending approvals\" hidden>0</span>"
        ),
        "{runs}"
    );
    let run = srv.start_probe(
        "loops",
        json!({"op": "exec", "argv": ["tee", "-a", "count.txt"], "stdin": "nav\n"}),
    );
    let a = srv.pending_approval("loops", &run);
    let form = page("/runs/new");
    assert!(
        form.contains(
            "<span class=\"count\" id=\"pending-count\" title=\"pending approvals\">1</span>"
        ),
        "{form}"
    );
    let js = http(&srv.addr, "GET", "/assets/app.js", &[], None).body;
    assert!(js.contains("/api/v1/approvals?status=pending"), "{js}");
    let r = srv.post(
        &format!("/api/v1/approvals/{}/deny", a["id"].as_str().unwrap()),
        srv.token("loops", "approver"),
        json!({"digest": a["digest"], "reason": "cleanup"}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    srv.wait_final("loops", &run);
}

#[test]
fn the_command_line_lists_and_shows_a_served_loop_by_its_name_and_commands() {
    let srv = shared();
    let (status, v) = start(json!({"loop": "loops/tidy.yaml", "workspace": "proj"}));
    assert_eq!(status, 201, "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    srv.wait_final("loops", &id);
    let cli = |args: &[&str]| {
        let o = std::process::Command::new(BIN)
            .args(args)
            .args(["--server", &format!("http://{}", srv.addr)])
            .current_dir(std::env::temp_dir())
            .env_remove("LOOPBOX_STORE")
            .env("LOOPBOX_TOKEN", srv.token("loops", "viewer"))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let list = cli(&["runs", "--policy", "tidy"]);
    assert!(
        list.lines()
            .any(|l| l.starts_with(&id) && l.contains("loop tidy")),
        "{list}"
    );
    let shown = cli(&["runs", "show", &id]);
    for want in [
        format!("run {id} of loop tidy (builtin:fsm) on http://"),
        "loop:     loops/tidy.yaml".to_string(),
        "path:     look → wait → check → fixed → done (4 step(s))".to_string(),
        "check        shell  cat nothing.txt  -> exit 1 in".to_string(),
    ] {
        assert!(shown.contains(&want), "{want:?} in:\n{shown}");
    }
    assert!(!shown.contains("{\"exec\""), "{shown}");
}

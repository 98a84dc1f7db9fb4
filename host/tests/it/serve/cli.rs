//! `loopbox runs --server URL` as a person runs it: the real binary against
//! the shared `loopbox serve` ([`shared`], tenant `cli`), on whichever engine
//! this run of the suite uses (SQLite, or PostgreSQL with a worker). A
//! pending approval is approved with the command the dashboard prints, run
//! as printed, and the run goes on; a viewer's approve gets the server's 403;
//! a missing or wrong token, a wrong URL, and a server's file given as
//! `--store` each say what to do next, and no output ever holds the token.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{Srv, shared};
use crate::common::{BIN, code};

/// `loopbox ARGS` with `token` as LOOPBOX_TOKEN (none: unset), in a scratch
/// directory (no workspace store), run to its end.
fn cli(args: &[&str], token: Option<&str>) -> Output {
    let mut c = command(args, token);
    c.output().unwrap()
}

fn command(args: &[&str], token: Option<&str>) -> Command {
    let mut c = Command::new(BIN);
    c.args(args)
        .current_dir(std::env::temp_dir())
        .env_remove("LOOPBOX_SERVER")
        .env_remove("LOOPBOX_STORE")
        .env_remove("LOOPBOX_TOKEN")
        .stdin(Stdio::null());
    if let Some(t) = token {
        c.env("LOOPBOX_TOKEN", t);
    }
    c
}

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn url(srv: &Srv) -> String {
    format!("http://{}", srv.addr)
}

/// No word of `o` is one of the server's tokens.
fn no_token_in(srv: &Srv, o: &Output) {
    let all = format!("{}{}", out(o), err(o));
    for t in srv.tokens.values() {
        assert!(!all.contains(t.as_str()), "a token was printed: {all}");
    }
    assert!(!all.contains("lbx_"), "a token was printed: {all}");
}

/// The words of the command line the dashboard's approvals inbox prints for
/// run `run` (the `code data-field="cli"` of its card), as it prints them.
fn dashboard_command(srv: &Srv, tenant: &str, run: &str) -> Vec<String> {
    let page = srv.get("/approvals", srv.token(tenant, "approver"));
    assert_eq!(page.status, 200, "{}", page.body);
    let printed = page
        .body
        .split(r#"data-field="cli">"#)
        .skip(1)
        .map(|s| s.split('<').next().unwrap())
        .find(|cmd| cmd.contains(run))
        .unwrap_or_else(|| panic!("no command for run {run} on the page: {}", page.body));
    printed.split_whitespace().map(String::from).collect()
}

#[test]
fn a_served_run_is_listed_shown_approved_and_followed_from_the_command_line() {
    let srv = shared();
    let url = url(srv);
    let count = srv.root("cli").join("proj").join("count.txt");
    let _ = std::fs::remove_file(&count);
    let run = srv.start_probe(
        "cli",
        json!({"op": "exec", "argv": ["tee", "-a", "count.txt"], "stdin": "from the cli\n"}),
    );
    let a = srv.pending_approval("cli", &run);
    let approval = a["id"].as_str().unwrap();
    let digest = a["digest"].as_str().unwrap();
    // What the run's log (the dashboard's live log) says it waits for names
    // the server: it works as printed.
    let log = srv.get(
        &format!("/api/v1/runs/{run}/log?follow=false"),
        srv.token("cli", "viewer"),
    );
    assert!(
        log.body.contains(&format!(
            "waiting for approval {approval} (`loopbox runs approve {run} --server {url}` or `deny`)"
        )),
        "{}",
        log.body
    );
    let viewer = srv.token("cli", "viewer");

    // The list, as JSON in the local command's shape, and as its table.
    let o = cli(&["runs", "--server", &url, "--json"], Some(viewer));
    assert_eq!(code(&o), 0, "{}", err(&o));
    let rows: Value = serde_json::from_str(&out(&o)).unwrap();
    let row = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == run.as_str())
        .unwrap_or_else(|| panic!("run {run} not listed: {rows:#}"));
    let mut keys: Vec<&str> = row
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "actions",
            "id",
            "last_event",
            "loop",
            "policy",
            "spend",
            "started",
            "status",
            "turns",
            "updated",
            "wakes"
        ]
    );
    assert_eq!(
        (row["status"].as_str(), row["last_event"].as_str()),
        (Some("waiting"), Some("start"))
    );
    let o = cli(
        &[
            "runs", "--server", &url, "--status", "waiting", "--limit", "500",
        ],
        Some(viewer),
    );
    assert_eq!(code(&o), 0, "{}", err(&o));
    let table = out(&o);
    assert!(table.starts_with("ID "), "{table}");
    assert!(
        table
            .lines()
            .any(|l| l.starts_with(&run) && l.contains(" waiting ")),
        "{table}"
    );
    no_token_in(srv, &o);

    // `show` prints the request and the command that decides it, server included.
    let o = cli(&["runs", "show", &run, "--server", &url], Some(viewer));
    assert_eq!(code(&o), 0, "{}", err(&o));
    let shown = out(&o);
    for want in [
        format!("run {run} of "),
        "status:   waiting".to_string(),
        "command: tee -a count.txt".to_string(),
        format!(
            "decide with `loopbox runs approve {run} --approval {approval} --digest {} --server {url}`",
            &digest[..16]
        ),
    ] {
        assert!(shown.contains(&want), "{want:?} in:\n{shown}");
    }
    let o = cli(
        &["runs", "show", &run, "--server", &url, "--json"],
        Some(viewer),
    );
    let shown: Value = serde_json::from_str(&out(&o)).unwrap();
    assert_eq!(shown["approvals"][0]["digest"], digest);
    assert_eq!(shown["status"], "waiting");

    // A viewer's approve: the server's 403, word for word, and nothing decided.
    let refused = srv.post(
        &format!("/api/v1/approvals/{approval}/approve"),
        viewer,
        json!({"digest": digest}),
    );
    assert_eq!(refused.status, 403);
    let o = cli(&["runs", "approve", &run, "--server", &url], Some(viewer));
    assert_eq!(code(&o), 2, "{}", err(&o));
    assert_eq!(err(&o), format!("error: {}\n", refused.error()));
    no_token_in(srv, &o);

    // The dashboard's command, run as printed with an approver's token.
    let words = dashboard_command(srv, "cli", &run);
    assert_eq!(
        words.join(" "),
        format!(
            "loopbox runs approve {run} --approval {approval} --digest {} --server {url}",
            &digest[..16]
        )
    );
    assert_eq!(words[0], "loopbox");
    let args: Vec<&str> = words[1..].iter().map(String::as_str).collect();
    let o = cli(&args, Some(srv.token("cli", "approver")));
    assert_eq!(code(&o), 0, "{}", err(&o));
    assert_eq!(
        out(&o),
        format!(
            "approved {approval}; the server moves the run on (`loopbox runs log {run} --follow --server {url}`)\n"
        )
    );
    let said = err(&o);
    assert!(
        said.starts_with(&format!(
            "approved {approval} of run {run} by cli/approver-1:\n  exec `tee -a count.txt` (needs a yes: "
        )) && said.contains("\n  command: tee -a count.txt\n")
            && said.contains(&format!("\n  digest:  {digest}\n")),
        "{said}"
    );
    no_token_in(srv, &o);
    // The run went on: the approved command ran, once.
    let v = srv.wait_final("cli", &run);
    assert_eq!(v["status"], "done", "{v:#}");
    assert_eq!(std::fs::read_to_string(&count).unwrap(), "from the cli\n");
    // A second decision is the server's 409.
    let o = cli(
        &["runs", "approve", &run, "--server", &url],
        Some(srv.token("cli", "approver")),
    );
    assert_eq!(code(&o), 2, "{}", err(&o));
    assert!(
        err(&o).contains("is not waiting for an approval (it is done)"),
        "{}",
        err(&o)
    );

    // Its log, as text and as JSON lines.
    let o = cli(&["runs", "log", &run, "--server", &url], Some(viewer));
    assert_eq!(code(&o), 0, "{}", err(&o));
    assert!(
        out(&o).contains("ran `tee -a count.txt`: exit 0"),
        "{}",
        out(&o)
    );
    let o = cli(
        &["runs", "log", &run, "--server", &url, "--json"],
        Some(viewer),
    );
    for line in out(&o).lines() {
        let l: Value = serde_json::from_str(line).unwrap();
        let mut keys: Vec<&str> = l.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort();
        assert_eq!(keys, ["at", "level", "message", "source"], "{line}");
    }
}

#[test]
fn a_served_run_is_answered_followed_denied_cancelled_and_resumed_from_the_command_line() {
    let srv = shared();
    let url = url(srv);
    let op = srv.token("cli", "operator");
    // `log --follow` prints each line as it comes, and ends with the run.
    let asks = srv.start_probe("cli", json!({"op": "echo", "then": "ask"}));
    srv.wait_run("cli", &asks, |v| v["status"] == "waiting");
    let follow = command(
        &["runs", "log", &asks, "--follow", "--server", &url],
        Some(op),
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let o = cli(
        &["runs", "answer", &asks, "blue", "--server", &url],
        Some(op),
    );
    assert_eq!(code(&o), 0, "{}", err(&o));
    assert_eq!(
        out(&o),
        format!(
            "answered run {asks}: it is queued, and the server moves it on (`loopbox runs log {asks} --follow --server {url}`)\n"
        )
    );
    let started = Instant::now();
    let followed = follow.wait_with_output().unwrap();
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_eq!(code(&followed), 0, "{}", err(&followed));
    assert!(
        out(&followed).contains("decision: done (success): answer: blue"),
        "{}",
        out(&followed)
    );
    assert_eq!(srv.wait_final("cli", &asks)["status"], "done");

    // A denial with its reason reaches the policy as `declined`.
    let run = srv.start_probe(
        "cli",
        json!({"op": "exec", "argv": ["tee", "-a", "count.txt"], "stdin": "never\n"}),
    );
    srv.pending_approval("cli", &run);
    let o = cli(
        &[
            "runs",
            "deny",
            &run,
            "--reason",
            "not today",
            "--server",
            &url,
            "--json",
        ],
        Some(srv.token("cli", "approver")),
    );
    assert_eq!(code(&o), 0, "{}", err(&o));
    let v: Value = serde_json::from_str(&out(&o)).unwrap();
    assert_eq!(
        (v["run_id"].as_str(), v["approval"]["status"].as_str()),
        (Some(run.as_str()), Some("denied"))
    );
    assert_eq!(v["approval"]["reason"], "not today");
    let v = srv.wait_final("cli", &run);
    assert_eq!(v["outcome"]["data"]["err"]["kind"], "declined", "{v:#}");

    // A waiting run cancelled; an ended one cannot be resumed (the server's 409).
    let parked = srv.start_probe("cli", json!({"op": "echo", "then": "ask"}));
    srv.wait_run("cli", &parked, |v| v["status"] == "waiting");
    let o = cli(&["runs", "cancel", &parked, "--server", &url], Some(op));
    assert_eq!(code(&o), 0, "{}", err(&o));
    assert_eq!(out(&o), format!("cancelled: run {parked}\n"));
    let o = cli(&["runs", "resume", &parked, "--server", &url], Some(op));
    assert_eq!(code(&o), 1, "{}", err(&o));
    assert_eq!(
        err(&o),
        format!("error: run {parked} already ended (cancelled); there is nothing to continue\n")
    );
    // Flags that choose how this process drives a run mean nothing here.
    let o = cli(
        &["runs", "approve", &parked, "--no-resume", "--server", &url],
        Some(op),
    );
    assert_eq!(code(&o), 2);
    assert!(
        err(&o).contains("--no-resume does not apply to a server's run"),
        "{}",
        err(&o)
    );
}

#[test]
fn a_wrong_url_or_token_says_what_to_do() {
    let srv = shared();
    let url = url(srv);
    // No token.
    let o = cli(&["runs", "--server", &url], None);
    assert_eq!(code(&o), 2);
    assert_eq!(
        err(&o),
        format!(
            "error: LOOPBOX_TOKEN is not set: set LOOPBOX_TOKEN to a token of the server at {url} (an admin of your tenant makes one: `loopbox serve token create --tenant T --role approver --name NAME` on the server, or the dashboard's Tokens page), or give --token-file PATH\n"
        )
    );
    // A token the server does not know: 401, and what to do.
    let forged = "lbx_0123456789abcdef_notarealtokennotarealtokennotarealtoken1";
    let o = cli(&["runs", "--server", &url, "--json"], Some(forged));
    assert_eq!(code(&o), 2);
    let said = err(&o);
    assert!(
        said.starts_with(&format!("error: the server at {url} refused the token: "))
            && said.ends_with(
                "; set LOOPBOX_TOKEN to a token of this server (an admin makes one: `loopbox serve token create --tenant T --role ROLE --name NAME`)\n"
            ),
        "{said}"
    );
    assert!(
        !said.contains(forged) && !out(&o).contains(forged),
        "{said}"
    );
    let v: Value = serde_json::from_str(&out(&o)).unwrap();
    assert_eq!(v["exit_code"], 2);
    // Nobody listens there: the URL is named.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let o = cli(
        &["runs", "--server", &format!("http://{closed}")],
        Some(srv.token("cli", "viewer")),
    );
    assert_eq!(code(&o), 70);
    let said = err(&o);
    assert!(
        said.starts_with(&format!(
            "error: cannot reach the server at http://{closed}: "
        )) && said.ends_with(
            "; is `loopbox serve` running there, and is the URL right (--server, LOOPBOX_SERVER)?\n"
        ),
        "{said}"
    );
    no_token_in(srv, &o);
    // A URL without its scheme.
    let o = cli(
        &["runs", "--server", &srv.addr],
        Some(srv.token("cli", "viewer")),
    );
    assert_eq!(code(&o), 2);
    assert!(
        err(&o).contains("is not a server URL: give it with its scheme"),
        "{}",
        err(&o)
    );
    // LOOPBOX_SERVER, and the token from a file.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    std::fs::write(&file, format!("{}\n", srv.token("cli", "viewer"))).unwrap();
    let o = command(
        &[
            "runs",
            "--token-file",
            file.to_str().unwrap(),
            "--limit",
            "1",
        ],
        None,
    )
    .env("LOOPBOX_SERVER", &url)
    .output()
    .unwrap();
    assert_eq!(code(&o), 0, "{}", err(&o));
    assert!(out(&o).starts_with("ID "), "{}", out(&o));
    // A server's store file is not a `--store`: its runs are the server's.
    let data = Path::new(&srv.dir).join("data/loopbox.db");
    let o = cli(
        &["runs", "approve", "r1", "--store", data.to_str().unwrap()],
        None,
    );
    assert_eq!(code(&o), 2);
    assert!(
        err(&o).contains("a server's runs, on SQLite or PostgreSQL, are reached through the server, `loopbox runs --server http://HOST:PORT`"),
        "{}",
        err(&o)
    );
}

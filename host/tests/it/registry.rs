//! Shipping policies through a real OCI registry: Debian's `docker-registry`
//! (the CNCF distribution registry) started on loopback for each test. A
//! policy is published, added after review, run under its own grants,
//! upgraded with a grant diff, and refused when a blob, the store, the
//! signature or the needs were tampered with. The real binary throughout;
//! the one test double is the hostile registry at the end, which a real
//! registry cannot be made to be.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common;

use common::{code, probe};
use serde_json::Value;

/// A registry on 127.0.0.1, its storage in a temp dir; stopped on drop.
struct Registry {
    child: Child,
    port: u16,
    storage: tempfile::TempDir,
}

impl Registry {
    fn start() -> Registry {
        let bin = ["/usr/bin/docker-registry", "/usr/local/bin/registry"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .expect(
                "these tests need an OCI registry: `apt-get install docker-registry` (scripts/test.sh installs it)",
            );
        let storage = tempfile::tempdir().unwrap();
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let config = storage.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: 127.0.0.1:{port}\n",
                storage.path().join("data").display()
            ),
        )
        .unwrap();
        let child = Command::new(bin)
            .arg("serve")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the registry did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Registry {
            child,
            port,
            storage,
        }
    }

    fn reference(&self, repo_tag: &str) -> String {
        format!("oci://127.0.0.1:{}/{repo_tag}", self.port)
    }

    /// Where the registry keeps the blob with this `sha256:` digest.
    fn blob(&self, digest: &str) -> PathBuf {
        let hex = digest.strip_prefix("sha256:").unwrap();
        self.storage
            .path()
            .join("data/docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A workspace and the component cache (with its store) of one test.
struct Ws {
    dir: tempfile::TempDir,
    cache: tempfile::TempDir,
}

impl Ws {
    fn new(config: &str) -> Ws {
        let dir = tempfile::tempdir().unwrap();
        std::fs::copy(probe(), dir.path().join("probe.wasm")).unwrap();
        std::fs::write(dir.path().join("notes.txt"), "hello\n").unwrap();
        std::fs::write(dir.path().join("loopbox.toml"), config).unwrap();
        Ws {
            dir,
            cache: tempfile::tempdir().unwrap(),
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn lb(&self, args: &[&str]) -> Output {
        common::trusted_command(self.path())
            .arg("-C")
            .arg(self.path())
            .args(args)
            .env("LOOPBOX_CACHE_DIR", self.cache.path())
            .env("CI", "true")
            .current_dir(self.path())
            .output()
            .unwrap()
    }

    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.path().join(name)).unwrap_or_default()
    }

    /// `loopbox.lock`'s entry for `name`, as loopbox reads it.
    fn locked(&self, name: &str) -> loopbox::dist::lock::Locked {
        loopbox::dist::lock::Lock::read(&self.path().join("loopbox.lock"))
            .unwrap()
            .policies[name]
            .clone()
    }

    fn store(&self) -> PathBuf {
        self.cache.path().join("components/sha256")
    }

    /// Run installed policy `name` with a probe exec of `argv`: whether the command ran.
    fn exec(&self, name: &str, argv: &[&str]) -> (i32, bool, String) {
        let input = serde_json::json!({"op": "exec", "argv": argv}).to_string();
        let o = self.lb(&["run", name, "--input", &input, "--json"]);
        let out: Value = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
        let data = out["outcome"]["data"].to_string();
        let ran = data.contains(r#""ok""#) && !data.contains(r#""err""#);
        (code(&o), ran, format!("{out} {}", err(&o)))
    }
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `loopbox key new` in `dir`; returns the key file and its public key.
fn key(ws: &Ws, name: &str) -> (String, String) {
    let file = ws.cache.path().join(format!("{name}.key"));
    let o = ws.lb(&["key", "new", file.to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}", err(&o));
    (
        file.to_string_lossy().into_owned(),
        out(&o).trim().to_string(),
    )
}

/// Publish the probe to `reference` asking for `needs` (TOML); the JSON report.
fn publish(ws: &Ws, reference: &str, needs: &str, sign: &[&str]) -> Value {
    let needs_file = ws.cache.path().join("needs.toml");
    std::fs::write(&needs_file, needs).unwrap();
    let mut args = vec![
        "publish",
        "probe.wasm",
        reference,
        "--needs",
        needs_file.to_str().unwrap(),
        "--json",
    ];
    args.extend_from_slice(sign);
    let o = ws.lb(&args);
    assert_eq!(code(&o), 0, "{}", err(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

fn flip_a_byte(path: &Path) {
    let mut bytes = std::fs::read(path).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x01;
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn a_published_policy_is_added_reviewed_run_upgraded_and_refused_when_tampered() {
    let registry = Registry::start();
    let ws = Ws::new("# my workspace\n[shell]\nallow = [[\"cat\"]]\n");
    let (alice_key, alice) = key(&ws, "alice");
    let reference = registry.reference("acme/lister:1.0");
    let v1 = publish(
        &ws,
        &reference,
        "exec = [[\"ls\"]]\n",
        &["--key", &alice_key],
    );
    assert_eq!(v1["signed_by"], alice.as_str());

    // Signed by a key the user does not trust yet: refused, and nothing written.
    let o = ws.lb(&["add", &reference, "--yes"]);
    assert_eq!(code(&o), 2, "{}", err(&o));
    assert!(
        err(&o).contains("a key [trust.keys] does not list; nothing was changed"),
        "{}",
        err(&o)
    );
    std::fs::write(
        ws.path().join("loopbox.toml"),
        format!(
            "# my workspace\n[shell]\nallow = [[\"cat\"]]\n\n[trust.keys]\nalice = \"{alice}\"\n"
        ),
    )
    .unwrap();
    let before = ws.read("loopbox.toml");

    // Reviewed but not approved (no terminal, no --yes): still nothing written.
    let o = ws.lb(&["add", &reference]);
    assert_eq!(code(&o), 2);
    let review = err(&o);
    for line in [
        "policy      lister",
        &format!("signature   signed by `alice` ({alice})"),
        "imports     actions, state, workspace, log",
        "asks for    exec [ls]",
        "[policies.lister] will grant: exec [ls]",
        "was not approved; nothing was changed",
    ] {
        assert!(review.contains(line), "missing {line:?} in:\n{review}");
    }
    assert_eq!(ws.read("loopbox.toml"), before);
    assert!(!ws.path().join("loopbox.lock").exists());

    // Approved: its own section, pinned in the lock, the user's comment kept.
    let o = ws.lb(&["add", &reference, "--yes", "--json"]);
    assert_eq!(code(&o), 0, "{}", err(&o));
    let added: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(added["digest"], v1["digest"]);
    assert_eq!(added["manifest"], v1["manifest"]);
    let config = ws.read("loopbox.toml");
    assert!(config.starts_with("# my workspace\n"), "{config}");
    assert!(
        config.contains(&format!(
            "[policies.lister]\nsource = \"{reference}\"\n\n[policies.lister.shell]\nallow = [[\"ls\"]]\n"
        )),
        "{config}"
    );
    let lock = ws.read("loopbox.lock");
    assert!(
        lock.contains(&format!("digest = \"{}\"", v1["digest"].as_str().unwrap()))
            && lock.contains(&format!("signed_by = \"{alice}\"")),
        "{lock}"
    );

    // Inspected by name: what it imports beside what it is granted.
    let o = ws.lb(&["inspect", "lister", "--json"]);
    assert_eq!(code(&o), 0, "{}", err(&o));
    let report: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(report["capabilities"][0], "actions");
    assert_eq!(
        report["installed"]["grants"],
        "exec [ls]; read [none]; scripts no; network no; agent none"
    );
    assert!(
        report["installed"]["admission"]
            .as_str()
            .unwrap()
            .starts_with("runs: signed by `alice`"),
        "{report}"
    );

    // Run under its own grants: `ls`, never the top-level `cat`.
    let (c, ran, why) = ws.exec("lister", &["ls"]);
    assert!(c == 0 && ran, "{why}");
    let (_, ran, why) = ws.exec("lister", &["cat", "notes.txt"]);
    assert!(!ran && why.contains("policies.lister.shell.allow"), "{why}");

    // v2 moves the tag and asks for more. The lock still pins v1: `pull` into an
    // empty store fetches v1, by manifest digest.
    let v2 = publish(
        &ws,
        &reference,
        "exec = [[\"ls\"], [\"cat\", \"notes.txt\"]]\nscripts = true\n",
        &["--key", &alice_key],
    );
    assert_ne!(v2["manifest"], v1["manifest"]);
    std::fs::remove_dir_all(ws.store()).unwrap();
    let o = ws.lb(&["pull"]);
    assert_eq!(code(&o), 0, "{}", err(&o));
    assert!(out(&o).contains("lister: fetched"), "{}", out(&o));
    let o = ws.lb(&["inspect", "lister", "--json"]);
    let report: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        format!("blake3:{}", report["digest"].as_str().unwrap()),
        v1["digest"].as_str().unwrap(),
        "a moved tag changed what runs"
    );

    // Upgrading shows what v2 asks beyond the grants and needs a yes again.
    let o = ws.lb(&["add", &reference]);
    assert_eq!(code(&o), 2);
    let review = err(&o);
    assert!(
        review.contains(
            "it asks for more than [policies.lister] grants:\n  + exec [cat notes.txt]\n  + scripts (shell text run by sh -c)\n"
        ),
        "{review}"
    );
    assert_eq!(ws.read("loopbox.toml"), config, "refused, yet written");
    let o = ws.lb(&["add", &reference, "--yes"]);
    assert_eq!(code(&o), 0, "{}", err(&o));
    assert!(out(&o).starts_with("upgraded `lister`"), "{}", out(&o));
    let (_, ran, why) = ws.exec("lister", &["cat", "notes.txt"]);
    assert!(ran, "{why}");
    assert!(
        ws.read("loopbox.lock")
            .contains(v2["manifest"].as_str().unwrap())
    );

    // A tampered blob in the registry: `pull` refuses it and stores nothing.
    let layer = ws.locked("lister").component;
    let blob = registry.blob(&layer);
    let original = std::fs::read(&blob).unwrap();
    flip_a_byte(&blob);
    std::fs::remove_dir_all(ws.store()).unwrap();
    let o = ws.lb(&["pull"]);
    assert_eq!(code(&o), 1, "{}", err(&o));
    assert!(
        err(&o).contains("the registry sent a component that does not match its digest"),
        "{}",
        err(&o)
    );
    assert!(!ws.store().join(format!("{}.wasm", &layer[7..])).exists());
    let (c, _, why) = ws.exec("lister", &["ls"]);
    assert!(
        c == 2 && why.contains("is not fetched on this machine yet: `loopbox pull`"),
        "{why}"
    );

    // A tampered copy in the store: the run refuses it before compiling it.
    std::fs::write(&blob, original).unwrap();
    assert_eq!(code(&ws.lb(&["pull"])), 0);
    flip_a_byte(&ws.store().join(format!("{}.wasm", &layer[7..])));
    let (c, _, why) = ws.exec("lister", &["ls"]);
    assert!(
        c == 2 && why.contains("is not the component loopbox.lock pins"),
        "{why}"
    );
    // `pull` notices and fetches the pinned one again.
    let o = ws.lb(&["pull"]);
    assert!(out(&o).contains("lister: fetched"), "{}", out(&o));
    let (c, ran, why) = ws.exec("lister", &["ls"]);
    assert!(c == 0 && ran, "{why}");
}

#[test]
fn signatures_decide_what_runs() {
    let registry = Registry::start();
    let ws = Ws::new("");
    let (alice_key, alice) = key(&ws, "alice");
    let (mallory_key, mallory) = key(&ws, "mallory");
    std::fs::write(
        ws.path().join("loopbox.toml"),
        format!("[trust.keys]\nalice = \"{alice}\"\n"),
    )
    .unwrap();

    // Unsigned, or signed by someone else: refused unless the user accepts it as unsigned.
    let unsigned = registry.reference("acme/plain:1");
    publish(&ws, &unsigned, "exec = [[\"ls\"]]\n", &["--unsigned"]);
    let o = ws.lb(&["add", &unsigned, "--yes"]);
    assert!(
        code(&o) == 2 && err(&o).contains("is unsigned; nothing was changed"),
        "{}",
        err(&o)
    );
    let theirs = registry.reference("acme/theirs:1");
    publish(
        &ws,
        &theirs,
        "exec = [[\"ls\"]]\n",
        &["--key", &mallory_key],
    );
    let o = ws.lb(&["add", &theirs, "--yes"]);
    assert!(
        code(&o) == 2 && err(&o).contains(&format!("is signed by {mallory}")),
        "{}",
        err(&o)
    );
    let o = ws.lb(&["add", &theirs, "--yes", "--allow-unsigned"]);
    assert_eq!(code(&o), 0, "{}", err(&o));
    assert!(ws.read("loopbox.toml").contains("unsigned = true"));
    let (c, ran, why) = ws.exec("theirs", &["ls"]);
    assert!(c == 0 && ran, "{why}");

    // Without `unsigned = true` the same component does not run.
    let config = ws.read("loopbox.toml").replace("unsigned = true\n", "");
    std::fs::write(ws.path().join("loopbox.toml"), &config).unwrap();
    let (c, _, why) = ws.exec("theirs", &["ls"]);
    assert!(
        c == 2 && why.contains(&format!("policy `theirs` is signed by {mallory}")),
        "{why}"
    );
    // `inspect` shows the same verdict without running it.
    let o = ws.lb(&["inspect", "theirs"]);
    assert!(
        out(&o).contains("admission    REFUSED: policy `theirs` is signed by"),
        "{}",
        out(&o)
    );

    // A registry policy in the config that the lock does not pin is never fetched
    // or run: `loopbox add` has to show it first.
    let ghost = registry.reference("acme/ghost:1");
    std::fs::write(
        ws.path().join("loopbox.toml"),
        format!("{config}\n[policies.ghost]\nsource = \"{ghost}\"\n"),
    )
    .unwrap();
    let o = ws.lb(&["pull"]);
    assert!(
        code(&o) == 2 && err(&o).contains("`ghost` in the config but not in loopbox.lock"),
        "{}",
        err(&o)
    );
    let (c, _, why) = ws.exec("ghost", &["ls"]);
    assert!(
        c == 2 && why.contains("does not pin it: `loopbox add"),
        "{why}"
    );
    std::fs::write(ws.path().join("loopbox.toml"), &config).unwrap();

    // Local files: a signature that no longer verifies is refused, even with --allow-unsigned.
    let signed = registry.reference("acme/good:1");
    let report = publish(&ws, &signed, "exec = [[\"ls\"]]\n", &["--key", &alice_key]);
    let o = ws.lb(&["add", &signed, "--yes", "--name", "good"]);
    assert_eq!(code(&o), 0, "{}", err(&o));
    let layer = ws.locked("good").component[7..].to_string();
    let good = std::fs::read(ws.store().join(format!("{layer}.wasm"))).unwrap();
    assert_eq!(
        format!("blake3:{}", blake3::hash(&good).to_hex()),
        report["digest"].as_str().unwrap()
    );
    let mut changed = good.clone();
    // A byte of the code (the middle of the file) changed after signing.
    let mid = changed.len() / 2;
    changed[mid] ^= 1;
    std::fs::write(ws.path().join("changed.wasm"), &changed).unwrap();
    let o = ws.lb(&["add", "changed.wasm", "--yes", "--allow-unsigned"]);
    assert!(
        code(&o) == 2 && err(&o).contains("does not verify"),
        "{}",
        err(&o)
    );
    // A section added after the signature.
    let after = loopbox::dist::sections::append(good, "extra", b"x");
    std::fs::write(ws.path().join("after.wasm"), &after).unwrap();
    let o = ws.lb(&["add", "after.wasm", "--yes", "--allow-unsigned"]);
    assert!(
        code(&o) == 2 && err(&o).contains("is not its last section"),
        "{}",
        err(&o)
    );
    assert!(!ws.read("loopbox.toml").contains("[policies.changed]"));
}

#[test]
fn needs_cannot_ask_for_what_only_the_user_decides() {
    let ws = Ws::new("[trust.keys]\n");
    let bare = std::fs::read(probe()).unwrap();
    for (needs, why) in [
        (
            r#"{"exec":[["ls"]],"writable":[".git"]}"#,
            "it may only ask for exec, scripts, network, prompts and read",
        ),
        (r#"{"sandbox":"none"}"#, "it may only ask for"),
        (
            "{\"exec\":[[\"ls\",\"\\u001b]0;pwned\\u0007\"]]}",
            "control character",
        ),
    ] {
        let c = loopbox::dist::sections::append(
            bare.clone(),
            loopbox::dist::sections::NEEDS,
            needs.as_bytes(),
        );
        std::fs::write(ws.path().join("odd.wasm"), &c).unwrap();
        let o = ws.lb(&["add", "odd.wasm", "--yes", "--allow-unsigned"]);
        assert!(
            code(&o) == 2 && err(&o).contains(why),
            "{needs}: {}",
            err(&o)
        );
        assert!(
            !err(&o).contains('\u{1b}'),
            "a terminal escape reached stderr"
        );
    }
    assert_eq!(ws.read("loopbox.toml"), "[trust.keys]\n");
    // A needs file for publish is held to the same vocabulary.
    std::fs::write(ws.path().join("n.toml"), "unsafe_env = [\"LD_PRELOAD\"]\n").unwrap();
    let o = ws.lb(&[
        "publish",
        "probe.wasm",
        "oci://127.0.0.1:1/a/b:1",
        "--unsigned",
        "--needs",
        "n.toml",
    ]);
    assert!(
        code(&o) == 2 && err(&o).contains("unknown field `unsafe_env`"),
        "{}",
        err(&o)
    );
}

#[test]
fn the_lock_is_out_of_reach_of_sandboxed_commands() {
    let script = "echo '[policies.x]' >> loopbox.lock; rm -f loopbox.lock; echo tried";
    let ws = Ws::new(&format!(
        "[shell]\nallow = [[\"sh\", \"-c\", {}]]\n",
        serde_json::to_string(script).unwrap()
    ));
    std::fs::write(ws.path().join("loopbox.lock"), "version = 1\n").unwrap();
    let input = serde_json::json!({"op": "exec", "argv": ["sh", "-c", script]}).to_string();
    let o = ws.lb(&["run", "probe.wasm", "--input", &input, "--json"]);
    assert_eq!(code(&o), 0, "{}", err(&o));
    let result: Value = serde_json::from_slice(&o.stdout).unwrap();
    let data = result["outcome"]["data"].to_string();
    assert!(
        data.contains(r#""ok""#) && data.contains("tried"),
        "the command did not run: {data}"
    );
    assert_eq!(ws.read("loopbox.lock"), "version = 1\n");
    // Nor can one plant a lock where there is none.
    std::fs::remove_file(ws.path().join("loopbox.lock")).unwrap();
    let o = ws.lb(&["run", "probe.wasm", "--input", &input, "--json"]);
    assert_eq!(code(&o), 0, "{}", err(&o));
    assert!(
        !ws.path().join("loopbox.lock").exists(),
        "a sandboxed command planted a lock: {:?}",
        ws.read("loopbox.lock")
    );
}

/// How a hostile registry answers a request for a path: (status line and headers, body).
type Respond = fn(&str) -> (String, Vec<u8>);

/// A registry that answers every request with `respond(path)`.
fn hostile(respond: Respond) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            let mut buf = [0u8; 4096];
            let n = s.read(&mut buf).unwrap_or(0);
            let request = String::from_utf8_lossy(&buf[..n]).to_string();
            let path = request.split(' ').nth(1).unwrap_or("").to_string();
            let (head, body) = respond(&path);
            let _ = s.write_all(head.as_bytes());
            let _ = s.write_all(&body);
        }
    });
    port
}

#[test]
fn a_hostile_registry_cannot_grow_memory_or_swap_what_it_serves() {
    let ws = Ws::new("");
    let cases: [(Respond, &str); 4] = [
        // A manifest past 4 MiB.
        (
            |_| {
                let body = vec![b' '; (4 << 20) + 10];
                (
                    format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len()),
                    body,
                )
            },
            "more than 4194304 bytes for the manifest",
        ),
        // A component declared larger than loopbox ever loads.
        (
            |_| {
                let m = format!(
                    r#"{{"schemaVersion":2,"config":{{"mediaType":"application/vnd.wasm.config.v0+json","digest":"sha256:{z}","size":2}},"layers":[{{"mediaType":"application/wasm","digest":"sha256:{z}","size":99999999999}}]}}"#,
                    z = "0".repeat(64)
                );
                (
                    format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", m.len()),
                    m.into_bytes(),
                )
            },
            "at most 268435456 are fetched",
        ),
        // A blob longer than its manifest says.
        (
            |path| {
                if path.contains("/manifests/") {
                    let m = format!(
                        r#"{{"schemaVersion":2,"config":{{"mediaType":"application/vnd.wasm.config.v0+json","digest":"sha256:{z}","size":2}},"layers":[{{"mediaType":"application/wasm","digest":"sha256:{z}","size":1000}}]}}"#,
                        z = "0".repeat(64)
                    );
                    (
                        format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", m.len()),
                        m.into_bytes(),
                    )
                } else {
                    let body = vec![0u8; 1 << 20];
                    (
                        format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len()),
                        body,
                    )
                }
            },
            "more than 1000 bytes for the component",
        ),
        // A container image, not a component.
        (
            |_| {
                let m = r#"{"schemaVersion":2,"config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:00","size":2},"layers":[]}"#;
                (
                    format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", m.len()),
                    m.as_bytes().to_vec(),
                )
            },
            "is not a Wasm component: its config is `application/vnd.oci.image.config.v1+json`",
        ),
    ];
    for (respond, why) in cases {
        let port = hostile(respond);
        let o = ws.lb(&["add", &format!("oci://127.0.0.1:{port}/a/b:1"), "--yes"]);
        assert!(code(&o) == 1 && err(&o).contains(why), "{why}: {}", err(&o));
    }
    assert!(!ws.store().exists(), "something was stored");
    assert!(!ws.path().join("loopbox.lock").exists());
}

/// Another OCI client reads what `loopbox publish` pushed as a Wasm component
/// artifact: skopeo (containers/image), which knows nothing of loopbox. (wkg 0.16.1
/// was checked by hand both ways; see the README.)
#[test]
fn what_loopbox_publishes_is_a_wasm_artifact_other_clients_read() {
    let registry = Registry::start();
    let ws = Ws::new("");
    let reference = registry.reference("acme/lister:2");
    let report = publish(&ws, &reference, "exec = [[\"ls\"]]\n", &["--unsigned"]);
    let docker = format!("docker://{}", reference.trim_start_matches("oci://"));
    let skopeo = |args: &[&str]| {
        let o = Command::new("skopeo").args(args).output().expect(
            "these tests need skopeo: `apt-get install skopeo` (scripts/test.sh installs it)",
        );
        assert!(o.status.success(), "skopeo {args:?}: {}", err(&o));
        o.stdout
    };
    let raw = skopeo(&["inspect", "--tls-verify=false", "--raw", &docker]);
    assert_eq!(
        loopbox::dist::registry::sha256(&raw),
        report["manifest"].as_str().unwrap(),
        "skopeo saw another manifest"
    );
    let manifest: Value = serde_json::from_slice(&raw).unwrap();
    assert_eq!(
        manifest["config"]["mediaType"],
        "application/vnd.wasm.config.v0+json"
    );
    assert_eq!(manifest["layers"][0]["mediaType"], "application/wasm");
    let out = tempfile::tempdir().unwrap();
    let dest = format!("dir:{}", out.path().join("copy").display());
    skopeo(&["copy", "--src-tls-verify=false", &docker, &dest]);
    let layer = manifest["layers"][0]["digest"].as_str().unwrap();
    let bytes = std::fs::read(out.path().join("copy").join(&layer[7..])).unwrap();
    assert_eq!(
        format!("blake3:{}", blake3::hash(&bytes).to_hex()),
        report["digest"].as_str().unwrap(),
        "the component skopeo fetched is not the one published"
    );
}

/// One request a test server received.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path: String,
    /// Header names lower-cased.
    headers: Vec<(String, String)>,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

type Answer = std::sync::Arc<dyn Fn(&Seen) -> (String, Vec<u8>) + Send + Sync>;

/// An HTTP server on `addr` (`127.0.0.2:0` is another origin than
/// `127.0.0.1:0`) that records every request, headers included, and answers
/// each with `answer` on a connection of its own. An answer whose head is
/// `HANG` is never sent: the connection stays open and silent.
struct Server {
    port: u16,
    ip: std::net::IpAddr,
    seen: std::sync::Arc<std::sync::Mutex<Vec<Seen>>>,
}

impl Server {
    fn start(addr: &str, answer: Answer) -> Server {
        let listener = TcpListener::bind(addr).unwrap();
        let local = listener.local_addr().unwrap();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let record = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut s) = stream else { continue };
                let (answer, record) = (answer.clone(), record.clone());
                std::thread::spawn(move || {
                    let Some(req) = read_request(&mut s) else {
                        return;
                    };
                    record.lock().unwrap().push(req.clone());
                    let (head, body) = answer(&req);
                    if head == "HANG" {
                        std::thread::sleep(Duration::from_secs(120));
                        return;
                    }
                    let _ = s.write_all(head.as_bytes());
                    let _ = s.write_all(&body);
                    if head.contains("X-Then-Hang") {
                        std::thread::sleep(Duration::from_secs(120));
                    }
                });
            }
        });
        Server {
            port: local.port(),
            ip: local.ip(),
            seen,
        }
    }

    fn base(&self) -> String {
        format!("{}:{}", self.ip, self.port)
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// The requests that carried an `Authorization` header.
    fn with_credentials(&self) -> Vec<Seen> {
        self.seen()
            .into_iter()
            .filter(|r| r.header("authorization").is_some())
            .collect()
    }
}

/// One request: its line, headers and (read and dropped) body.
fn read_request(s: &mut std::net::TcpStream) -> Option<Seen> {
    let mut raw = Vec::new();
    let mut byte = [0u8; 1];
    while !raw.ends_with(b"\r\n\r\n") {
        if s.read(&mut byte).ok()? == 0 {
            return None;
        }
        raw.push(byte[0]);
    }
    let text = String::from_utf8_lossy(&raw).to_string();
    let mut lines = text.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let (method, path) = (first.next()?.to_string(), first.next()?.to_string());
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    s.read_exact(&mut body).ok()?;
    Some(Seen {
        method,
        path,
        headers,
    })
}

fn answer(status: &str, headers: &[(&str, &str)], body: &[u8]) -> (String, Vec<u8>) {
    let mut head = format!(
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    (head, body.to_vec())
}

/// The registry login of these tests, for the registry at `host`.
fn login(host: &str) -> [(&'static str, String); 3] {
    [
        ("LOOPBOX_REGISTRY_HOST", host.to_string()),
        ("LOOPBOX_REGISTRY_USER", "me".to_string()),
        ("LOOPBOX_REGISTRY_PASSWORD", "hunter2".to_string()),
    ]
}

impl Ws {
    /// `loopbox ARGS` with `env`; killed (and the test failed) past `limit`.
    fn lb_within(&self, args: &[&str], env: &[(&str, String)], limit: Duration) -> Output {
        let mut child = common::trusted_command(self.path())
            .arg("-C")
            .arg(self.path())
            .args(args)
            .env("LOOPBOX_CACHE_DIR", self.cache.path())
            .env("CI", "true")
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .current_dir(self.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let started = Instant::now();
        while child.try_wait().unwrap().is_none() {
            if started.elapsed() > limit {
                let _ = child.kill();
                let o = child.wait_with_output().unwrap();
                panic!(
                    "`loopbox {}` was still running after {limit:?}; stderr so far:\n{}",
                    args.join(" "),
                    err(&o)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        child.wait_with_output().unwrap()
    }
}

/// A manifest for `component` in the Wasm artifact layout, and its layer digest.
fn manifest_for(component: &[u8]) -> (Vec<u8>, String) {
    let layer = loopbox::dist::registry::sha256(component);
    let config = b"{}";
    let m = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.wasm.config.v0+json",
                   "digest": loopbox::dist::registry::sha256(config), "size": config.len()},
        "layers": [{"mediaType": "application/wasm", "digest": layer, "size": component.len()}],
    });
    (serde_json::to_vec(&m).unwrap(), layer)
}

#[test]
fn publish_sends_no_login_to_an_upload_location_elsewhere() {
    let other = Server::start(
        "127.0.0.2:0",
        std::sync::Arc::new(|_| answer("201 Created", &[], b"")),
    );
    let upload = format!("http://{}/upload/1?state=abc", other.base());
    let registry = Server::start(
        "127.0.0.1:0",
        std::sync::Arc::new(move |r: &Seen| {
            if r.header("authorization").is_none() {
                return answer(
                    "401 Unauthorized",
                    &[("WWW-Authenticate", "Basic realm=\"registry\"")],
                    b"",
                );
            }
            match r.method.as_str() {
                "HEAD" => answer("404 Not Found", &[], b""),
                "POST" => answer("202 Accepted", &[("Location", &upload)], b""),
                _ => answer("201 Created", &[], b""),
            }
        }),
    );
    let ws = Ws::new("");
    let reference = format!("oci://{}/acme/lister:1", registry.base());
    let o = ws.lb_within(
        &["publish", "probe.wasm", &reference, "--unsigned"],
        &login(&registry.base()),
        Duration::from_secs(60),
    );
    assert_eq!(code(&o), 0, "{}", err(&o));
    let puts: Vec<Seen> = other
        .seen()
        .into_iter()
        .filter(|r| r.method == "PUT")
        .collect();
    assert_eq!(
        puts.len(),
        2,
        "both blobs go to the upload location: {puts:?}"
    );
    assert!(
        other.with_credentials().is_empty(),
        "the login reached another origin: {:?}",
        other.with_credentials()
    );
    assert!(
        !registry.with_credentials().is_empty(),
        "the registry itself never got the login, so this test shows nothing"
    );
}

/// This machine's address on its network (not loopback), if it has one.
fn outside_address() -> Option<std::net::IpAddr> {
    let s = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    s.connect("192.0.2.250:9").ok()?;
    let ip = s.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}

#[test]
fn add_sends_no_login_over_plain_http_to_a_token_service_elsewhere() {
    let Some(ip) = outside_address() else {
        eprintln!("skipped: this machine has no address but loopback to stand for another host");
        return;
    };
    let token = Server::start(
        &format!("{ip}:0"),
        std::sync::Arc::new(|_| answer("200 OK", &[], br#"{"token":"t"}"#)),
    );
    let realm = format!(
        "Bearer realm=\"http://{}/token\",service=\"r\"",
        token.base()
    );
    let registry = Server::start(
        "127.0.0.1:0",
        std::sync::Arc::new(move |r: &Seen| {
            if r.header("authorization").is_none() {
                answer("401 Unauthorized", &[("WWW-Authenticate", &realm)], b"")
            } else {
                answer("404 Not Found", &[], b"")
            }
        }),
    );
    let ws = Ws::new("");
    let reference = format!("oci://{}/a/b:1", registry.base());
    let o = ws.lb_within(
        &["add", &reference, "--yes"],
        &login(&registry.base()),
        Duration::from_secs(60),
    );
    assert!(
        token.with_credentials().is_empty(),
        "the login went over plain HTTP to {}: {:?}",
        token.base(),
        token.with_credentials()
    );
    assert_eq!(code(&o), 1, "{}", err(&o));
    assert!(
        err(&o).contains("is not an HTTPS URL")
            && err(&o).contains("both on this machine")
            && err(&o).contains("loopbox sends nothing there"),
        "{}",
        err(&o)
    );
}

#[test]
fn a_redirect_elsewhere_carries_no_login_and_never_asks_for_one() {
    let ws = Ws::new("");
    let component = std::fs::read(ws.path().join("probe.wasm")).unwrap();
    let (manifest, layer) = manifest_for(&component);
    // Another origin: a plain CDN for `/ok`, and one that asks for a login
    // (through a token service of its own) for anything else.
    let cdn_body = component.clone();
    let other = Server::start(
        "127.0.0.2:0",
        std::sync::Arc::new(move |r: &Seen| {
            if r.path.starts_with("/ok") {
                answer("200 OK", &[], &cdn_body)
            } else if r.path.starts_with("/token") {
                answer("200 OK", &[], br#"{"token":"stolen"}"#)
            } else {
                let port = r.header("host").unwrap_or_default().to_string();
                let realm = format!("Bearer realm=\"http://{port}/token\"");
                answer("401 Unauthorized", &[("WWW-Authenticate", &realm)], b"")
            }
        }),
    );
    for (target, expect_ok) in [("ok", true), ("login", false)] {
        let to = format!("http://{}/{target}/{layer}", other.base());
        let m = manifest.clone();
        let registry = Server::start(
            "127.0.0.1:0",
            std::sync::Arc::new(move |r: &Seen| {
                if r.header("authorization").is_none() {
                    answer(
                        "401 Unauthorized",
                        &[("WWW-Authenticate", "Basic realm=\"registry\"")],
                        b"",
                    )
                } else if r.path.contains("/manifests/") {
                    answer(
                        "200 OK",
                        &[("Content-Type", "application/vnd.oci.image.manifest.v1+json")],
                        &m,
                    )
                } else {
                    answer("307 Temporary Redirect", &[("Location", &to)], b"")
                }
            }),
        );
        let reference = format!("oci://{}/acme/{target}:1", registry.base());
        let o = ws.lb_within(
            &["add", &reference, "--yes", "--allow-unsigned"],
            &login(&registry.base()),
            Duration::from_secs(60),
        );
        assert!(
            other.with_credentials().is_empty(),
            "{target}: the login (or a token bought with it) reached another origin: {:?}",
            other.with_credentials()
        );
        if expect_ok {
            assert_eq!(code(&o), 0, "a plain redirect to a CDN works: {}", err(&o));
        } else {
            assert_eq!(code(&o), 1, "{}", err(&o));
            assert!(err(&o).contains("refused access"), "{}", err(&o));
        }
    }
    assert!(
        other.seen().iter().all(|r| !r.path.starts_with("/token")),
        "loopbox asked another origin's token service: {:?}",
        other.seen()
    );
}

#[test]
fn a_registry_that_hangs_fails_within_30_seconds_naming_the_phase_and_host() {
    let ws = Ws::new("");
    // Accepts, reads the request, never answers.
    let silent = Server::start(
        "127.0.0.1:0",
        std::sync::Arc::new(|_| ("HANG".to_string(), Vec::new())),
    );
    let o = ws.lb_within(
        &["add", &format!("oci://{}/a/b:1", silent.base()), "--yes"],
        &[],
        Duration::from_secs(30),
    );
    assert_eq!(code(&o), 1, "{}", err(&o));
    assert!(
        err(&o).contains(&format!(
            "{} timed out waiting for the first byte of its answer",
            silent.base()
        )),
        "{}",
        err(&o)
    );

    // Answers the manifest, then stops in the middle of the component.
    let component = std::fs::read(ws.path().join("probe.wasm")).unwrap();
    let (manifest, _) = manifest_for(&component);
    let size = component.len();
    let stalls = Server::start(
        "127.0.0.1:0",
        std::sync::Arc::new(move |r: &Seen| {
            if r.path.contains("/manifests/") {
                answer("200 OK", &[], &manifest)
            } else {
                let head =
                    format!("HTTP/1.1 200 OK\r\nContent-Length: {size}\r\nX-Then-Hang: 1\r\n\r\n");
                (head, vec![0u8; 1000])
            }
        }),
    );
    let o = ws.lb_within(
        &["add", &format!("oci://{}/a/b:1", stalls.base()), "--yes"],
        &[],
        Duration::from_secs(30),
    );
    assert_eq!(code(&o), 1, "{}", err(&o));
    let e = err(&o);
    assert!(
        e.contains(&format!(
            "fetching the component ({size} bytes) from {}",
            stalls.base()
        )) && e.contains(&format!(" of {size} bytes of the component\n"))
            && e.contains(&format!(
                "{} stopped sending the component after 1000 of {size} bytes: nothing came for",
                stalls.base()
            )),
        "{e}"
    );
}

#[test]
fn a_new_signer_is_shown_and_needs_a_yes() {
    let registry = Registry::start();
    let ws = Ws::new("");
    let (alice_key, alice) = key(&ws, "alice");
    let (bob_key, bob) = key(&ws, "bob");
    std::fs::write(
        ws.path().join("loopbox.toml"),
        format!("[trust.keys]\nalice = \"{alice}\"\nbob = \"{bob}\"\n"),
    )
    .unwrap();
    let reference = registry.reference("acme/lister:1");
    publish(
        &ws,
        &reference,
        "exec = [[\"ls\"]]\n",
        &["--key", &alice_key],
    );
    let o = ws.lb(&["add", &reference, "--yes"]);
    assert_eq!(code(&o), 0, "{}", err(&o));
    assert_eq!(
        ws.locked("lister").signed_by.as_deref(),
        Some(alice.as_str())
    );
    let config = ws.read("loopbox.toml");

    // The same needs, signed by another trusted key: shown, and not installed without a yes.
    publish(&ws, &reference, "exec = [[\"ls\"]]\n", &["--key", &bob_key]);
    let o = ws.lb(&["add", &reference]);
    assert_eq!(code(&o), 2, "{}", err(&o));
    let review = err(&o);
    assert!(
        review.contains(&format!(
            "it is signed by another key than the version installed now: `alice` ({alice}) -> `bob` ({bob})"
        )) && review.contains("was not approved; nothing was changed"),
        "{review}"
    );
    assert_eq!(
        ws.locked("lister").signed_by.as_deref(),
        Some(alice.as_str())
    );
    assert_eq!(ws.read("loopbox.toml"), config);

    // With a yes it is installed, and the lock names the new signer.
    let o = ws.lb(&["add", &reference, "--yes"]);
    assert_eq!(code(&o), 0, "{}", err(&o));
    assert_eq!(ws.locked("lister").signed_by.as_deref(), Some(bob.as_str()));
    // The same signer and needs again: nothing new to approve.
    let o = ws.lb(&["add", &reference]);
    assert_eq!(code(&o), 0, "{}", err(&o));
}

/// Issue 49, item 2: `add lister.wasm` replaced a component signed by one key
/// with one signed by another: exit 0, no question, and no `loopbox.lock` entry
/// for the local source. Its signer is recorded now, and a new one is asked
/// about as on the registry path (`--yes` to accept; nothing changed without it).
#[test]
fn a_local_component_signed_by_a_new_key_is_shown_and_needs_a_yes() {
    let ws = Ws::new("");
    let (alice_key, alice) = key(&ws, "alice");
    let (bob_key, bob) = key(&ws, "bob");
    std::fs::write(
        ws.path().join("loopbox.toml"),
        format!("[trust.keys]\nalice = \"{alice}\"\nbob = \"{bob}\"\n"),
    )
    .unwrap();
    let probe = std::fs::read(ws.path().join("probe.wasm")).unwrap();
    let sign_as = |key: &str| {
        let signed = loopbox::dist::sign::SecretKey::read(Path::new(key))
            .unwrap()
            .sign(&probe)
            .unwrap();
        std::fs::write(ws.path().join("lister.wasm"), signed).unwrap();
    };
    // `[local.NAME]` of loopbox.lock: (source, signed_by).
    let local = |name: &str| {
        let lock: toml::Value =
            toml::from_str(&ws.read("loopbox.lock")).unwrap_or(toml::Value::Integer(0));
        let entry = lock.get("local")?.get(name)?;
        let field = |k: &str| entry.get(k).and_then(|v| v.as_str()).map(String::from);
        Some((field("source").unwrap_or_default(), field("signed_by")))
    };
    sign_as(&alice_key);
    let o = ws.lb(&["add", "lister.wasm", "--yes"]);
    assert_eq!(code(&o), 0, "{}", err(&o));
    let (config, lock) = (ws.read("loopbox.toml"), ws.read("loopbox.lock"));

    // Signed by another trusted key: shown, and nothing changes without a yes.
    sign_as(&bob_key);
    let o = ws.lb(&["add", "lister.wasm"]);
    assert_eq!(code(&o), 2, "{}", err(&o));
    let review = err(&o);
    assert!(
        review.contains(&format!(
            "it is signed by another key than the version installed now: `alice` ({alice}) -> `bob` ({bob})"
        )) && review.contains("was not approved; nothing was changed"),
        "{review}"
    );
    assert_eq!(ws.read("loopbox.toml"), config);
    assert_eq!(ws.read("loopbox.lock"), lock);
    let entry = local("lister").expect("a lock entry for the local source");
    assert_eq!(entry, ("lister.wasm".to_string(), Some(alice.clone())));

    // With a yes it is installed, and the lock names the new signer.
    let o = ws.lb(&["add", "lister.wasm", "--yes"]);
    assert_eq!(code(&o), 0, "{}", err(&o));
    assert_eq!(local("lister").unwrap().1, Some(bob.clone()));
    // The same signer and needs again: nothing new to approve.
    let o = ws.lb(&["add", "lister.wasm"]);
    assert_eq!(code(&o), 0, "{}", err(&o));

    // An unsigned one in its place, even accepted as unsigned, is a new signer too,
    // and the review says it is unsigned (it said "not recorded").
    std::fs::write(ws.path().join("lister.wasm"), &probe).unwrap();
    let (config, lock) = (ws.read("loopbox.toml"), ws.read("loopbox.lock"));
    let o = ws.lb(&["add", "lister.wasm", "--allow-unsigned"]);
    assert_eq!(code(&o), 2, "{}", err(&o));
    assert!(
        err(&o).contains(&format!(
            "it is signed by another key than the version installed now: `bob` ({bob}) -> unsigned\n"
        )),
        "{}",
        err(&o)
    );
    assert_eq!(ws.read("loopbox.toml"), config);
    assert_eq!(ws.read("loopbox.lock"), lock);
}

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

mod common;

use common::{BIN, code, probe};
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
        Command::new(BIN)
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

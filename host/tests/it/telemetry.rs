//! OpenTelemetry end to end: the real binary, pointed by the standard
//! `OTEL_EXPORTER_OTLP_*` variables at an OTLP/HTTP receiver this test runs on
//! loopback, which decodes what arrives with the OTLP protobuf messages. The span tree of a real run is checked: the run's root span, this
//! process's span under it, a span per event, the command's span under its
//! event (rule, program, exit code), the agent turn with the GenAI attributes;
//! a later process (a hook event) writing into the same trace; and the metrics.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use prost::Message;
use serde_json::{Value, json};

use crate::common::{self, trusted_command};

/// One request the receiver got: its path, content type and body.
struct Received {
    path: String,
    content_type: String,
    body: Vec<u8>,
}

/// An OTLP/HTTP receiver on loopback: answers every POST with 200 and keeps it.
struct Receiver {
    port: u16,
    got: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    fn start() -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let got = Arc::new(Mutex::new(Vec::new()));
        let keep = got.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let keep = keep.clone();
                std::thread::spawn(move || serve(stream, keep));
            }
        });
        Receiver { port, got }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn take(&self) -> Vec<Received> {
        std::mem::take(&mut self.got.lock().unwrap())
    }
}

/// Requests on one connection (ureq keeps it alive), each kept whole.
fn serve(stream: std::net::TcpStream, keep: Arc<Mutex<Vec<Received>>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut out = stream;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
        let mut headers = HashMap::new();
        loop {
            let mut h = String::new();
            reader.read_line(&mut h).unwrap();
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
            }
        }
        let len: usize = headers
            .get("content-length")
            .and_then(|l| l.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0; len];
        reader.read_exact(&mut body).unwrap();
        keep.lock().unwrap().push(Received {
            path,
            content_type: headers.get("content-type").cloned().unwrap_or_default(),
            body,
        });
        out.write_all(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\n\r\n",
        )
        .unwrap();
    }
}

/// A span as the test reads it.
#[derive(Debug, Clone)]
struct Span {
    name: String,
    trace: String,
    id: String,
    parent: String,
    attrs: HashMap<String, Value>,
    /// OTLP's span kind (3: client) and status code (0 unset, 1 ok, 2 error).
    kind: i32,
    status: i32,
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn any(v: Option<&opentelemetry_proto::tonic::common::v1::AnyValue>) -> Value {
    match v.and_then(|v| v.value.as_ref()) {
        Some(Any::StringValue(s)) => json!(s),
        Some(Any::IntValue(i)) => json!(i),
        Some(Any::DoubleValue(d)) => json!(d),
        Some(Any::BoolValue(b)) => json!(b),
        _ => Value::Null,
    }
}

/// Every span in the protobuf trace exports received.
fn spans(got: &[Received]) -> Vec<Span> {
    let mut out = Vec::new();
    for r in got.iter().filter(|r| r.path == "/v1/traces") {
        assert_eq!(r.content_type, "application/x-protobuf");
        let req = ExportTraceServiceRequest::decode(r.body.as_slice()).unwrap();
        for rs in &req.resource_spans {
            let service = rs
                .resource
                .as_ref()
                .unwrap()
                .attributes
                .iter()
                .find(|a| a.key == "service.name")
                .map(|a| any(a.value.as_ref()));
            assert_eq!(service, Some(json!("loopbox")));
            for ss in &rs.scope_spans {
                for s in &ss.spans {
                    out.push(Span {
                        name: s.name.clone(),
                        trace: hex(&s.trace_id),
                        id: hex(&s.span_id),
                        parent: hex(&s.parent_span_id),
                        attrs: s
                            .attributes
                            .iter()
                            .map(|a| (a.key.clone(), any(a.value.as_ref())))
                            .collect(),
                        kind: s.kind,
                        status: s.status.as_ref().map_or(0, |st| st.code),
                    });
                }
            }
        }
    }
    out
}

/// The names of every metric in the protobuf metric exports received.
fn metric_names(got: &[Received]) -> Vec<String> {
    let mut names = Vec::new();
    for r in got.iter().filter(|r| r.path == "/v1/metrics") {
        let req = ExportMetricsServiceRequest::decode(r.body.as_slice()).unwrap();
        for rm in &req.resource_metrics {
            for sm in &rm.scope_metrics {
                names.extend(sm.metrics.iter().map(|m| m.name.clone()));
            }
        }
    }
    names.sort();
    names.dedup();
    names
}

/// Each data point of metric `name` (histograms and sums): its unit and attributes.
fn metric_points(got: &[Received], name: &str) -> Vec<(String, HashMap<String, Value>)> {
    use opentelemetry_proto::tonic::metrics::v1::metric::Data;
    let attrs = |kv: &[opentelemetry_proto::tonic::common::v1::KeyValue]| {
        kv.iter()
            .map(|a| (a.key.clone(), any(a.value.as_ref())))
            .collect::<HashMap<_, _>>()
    };
    let mut out = Vec::new();
    for r in got.iter().filter(|r| r.path == "/v1/metrics") {
        let req = ExportMetricsServiceRequest::decode(r.body.as_slice()).unwrap();
        for m in req
            .resource_metrics
            .iter()
            .flat_map(|rm| &rm.scope_metrics)
            .flat_map(|sm| &sm.metrics)
            .filter(|m| m.name == name)
        {
            match &m.data {
                Some(Data::Histogram(h)) => out.extend(
                    h.data_points
                        .iter()
                        .map(|p| (m.unit.clone(), attrs(&p.attributes))),
                ),
                Some(Data::Sum(h)) => out.extend(
                    h.data_points
                        .iter()
                        .map(|p| (m.unit.clone(), attrs(&p.attributes))),
                ),
                _ => {}
            }
        }
    }
    out
}

/// The spans as an indented tree, each with its attributes (printed by the
/// test, for a person to read: `cargo test ... -- --nocapture`).
fn tree(spans: &[Span]) -> String {
    fn walk(spans: &[Span], parent: &str, depth: usize, out: &mut String) {
        for s in spans.iter().filter(|s| s.parent == parent) {
            let mut attrs: Vec<String> = s.attrs.iter().map(|(k, v)| format!("{k}={v}")).collect();
            attrs.sort();
            out.push_str(&format!(
                "{}{}  {}\n",
                "  ".repeat(depth),
                s.name,
                attrs.join(" ")
            ));
            walk(spans, &s.id, depth + 1, out);
        }
    }
    let mut out = String::new();
    walk(spans, "", 0, &mut out);
    out
}

fn find<'a>(spans: &'a [Span], name: &str) -> &'a Span {
    spans.iter().find(|s| s.name == name).unwrap_or_else(|| {
        panic!(
            "no span `{name}` in {:#?}",
            spans.iter().map(|s| &s.name).collect::<Vec<_>>()
        )
    })
}

/// A workspace whose agent is the costly `claude` stand-in, with `true` granted.
fn workspace() -> (tempfile::TempDir, tempfile::TempDir) {
    let ws = tempfile::tempdir().unwrap();
    let bin = tempfile::tempdir().unwrap();
    std::fs::copy(
        common::repo().join("host/tests/fixtures/agents/costly-claude"),
        bin.path().join("claude"),
    )
    .unwrap();
    std::fs::write(
        ws.path().join("loopbox.toml"),
        format!(
            "[shell]\npath = \"{}:/usr/local/bin:/usr/bin:/bin\"\nallow = [[\"true\"]]\n\n[agent]\nrunner = \"claude\"\nwritable = []\npass_env = []\n",
            bin.path().display()
        ),
    )
    .unwrap();
    (ws, bin)
}

fn traced(ws: &Path, receiver: &Receiver, args: &[&str]) -> std::process::Output {
    trusted_command(ws)
        .arg("-C")
        .arg(ws)
        .args(args)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint())
        .env("CI", "true")
        .env(
            "LOOPBOX_CACHE_DIR",
            std::env::temp_dir().join("loopbox-cli-test-cache"),
        )
        .current_dir(ws)
        .output()
        .unwrap()
}

#[test]
fn a_run_is_one_trace_with_a_span_per_event_command_and_agent_turn() {
    let receiver = Receiver::start();
    let (ws, _bin) = workspace();
    let probe = common::probe().to_string_lossy().into_owned();
    let input = r#"{"op": "exec", "argv": ["true"], "then": "inject", "message": "go on"}"#;
    let o = traced(
        ws.path(),
        &receiver,
        &["run", &probe, "--input", input, "--json"],
    );
    assert_eq!(
        common::code(&o),
        0,
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let run: Value = serde_json::from_slice(&o.stdout).unwrap();
    let id = run["run_id"].as_str().unwrap();
    // The process flushed before it exited: everything has arrived.
    let got = receiver.take();
    let spans = spans(&got);

    println!("trace of run {id}:\n{}", tree(&spans));
    let (trace, root_id) = loopbox::telemetry::run_ids(id);
    let trace = trace.to_string();
    assert!(spans.iter().all(|s| s.trace == trace), "{spans:#?}");
    let root = find(&spans, &format!("loopbox run {probe}"));
    assert_eq!(
        (root.id.as_str(), root.parent.as_str()),
        (root_id.to_string().as_str(), "")
    );
    assert_eq!(root.attrs["loopbox.run.id"], json!(id));
    let process = find(&spans, "loopbox run");
    assert_eq!(process.parent, root.id);
    let start = find(&spans, "event start");
    assert_eq!(start.parent, process.id);
    assert_eq!(start.attrs["loopbox.decision"], json!("inject"));
    let exec = find(&spans, "exec true");
    assert_eq!(exec.parent, start.id);
    assert_eq!(exec.attrs["process.exit.code"], json!(0));
    assert_eq!(exec.attrs["process.executable.name"], json!("true"));
    assert_eq!(exec.attrs["loopbox.rule"], json!("shell.allow[0] (true)"));
    // The GenAI conventions' invoke-agent client span (v1.41.0): named after
    // the agent, its required and conditionally required attributes.
    let turn = find(&spans, "invoke_agent claude");
    assert_eq!(turn.parent, process.id);
    assert_eq!((turn.kind, turn.status), (3, 0), "a client span, no error");
    for (k, v) in [
        ("gen_ai.operation.name", json!("invoke_agent")),
        ("gen_ai.provider.name", json!("anthropic")),
        ("gen_ai.agent.name", json!("claude")),
        ("gen_ai.response.model", json!("claude-sonnet-4-5-20250929")),
        ("gen_ai.usage.input_tokens", json!(1100)),
        ("gen_ai.usage.output_tokens", json!(50)),
        ("gen_ai.usage.cache_read.input_tokens", json!(1000)),
        ("gen_ai.conversation.id", json!("costly-session")),
        ("loopbox.cost_usd", json!(0.1)),
    ] {
        assert_eq!(turn.attrs.get(k), Some(&v), "{k}: {turn:#?}");
    }
    let after = find(&spans, "event turn-complete");
    assert_eq!(
        (after.parent.as_str(), &after.attrs["loopbox.decision"]),
        (process.id.as_str(), &json!("done"))
    );
    // No prompt, reply or argument is sent anywhere.
    let all = format!("{spans:?}");
    assert!(
        !all.contains("go on") && !all.contains("still working"),
        "{all}"
    );

    // Both GenAI client metrics, each point with the attributes they require.
    for (metric, unit) in [
        ("gen_ai.client.token.usage", "{token}"),
        ("gen_ai.client.operation.duration", "s"),
    ] {
        let points = metric_points(&got, metric);
        assert!(!points.is_empty(), "no {metric}");
        for (u, attrs) in &points {
            assert_eq!(u, unit, "{metric}");
            assert_eq!(
                attrs.get("gen_ai.operation.name"),
                Some(&json!("invoke_agent")),
                "{metric}: {attrs:?}"
            );
            assert_eq!(
                attrs.get("gen_ai.provider.name"),
                Some(&json!("anthropic")),
                "{metric}: {attrs:?}"
            );
            assert_eq!(
                attrs.get("gen_ai.response.model"),
                Some(&json!("claude-sonnet-4-5-20250929")),
                "{metric}: {attrs:?}"
            );
            assert!(!attrs.contains_key("error.type"), "{metric}: {attrs:?}");
        }
        if metric == "gen_ai.client.token.usage" {
            let mut types: Vec<&Value> = points
                .iter()
                .filter_map(|(_, a)| a.get("gen_ai.token.type"))
                .collect();
            types.sort_by_key(|v| v.to_string());
            assert_eq!(types, [&json!("input"), &json!("output")]);
        }
    }
    // A run that succeeded is not marked as an error anywhere.
    assert!(spans.iter().all(|s| s.status != 2), "{spans:#?}");
    assert_eq!(
        process.attrs.get("loopbox.run.status"),
        Some(&json!("done"))
    );

    let names = metric_names(&got);
    for m in [
        "gen_ai.client.token.usage",
        "gen_ai.client.operation.duration",
        "loopbox.action.duration",
        "loopbox.approvals.waiting",
        "loopbox.decision.duration",
        "loopbox.spend.cost",
    ] {
        assert!(names.iter().any(|n| n == m), "{m} not in {names:?}");
    }
}

/// A turn whose agent fails and the run it fails: the invoke-agent span and
/// the duration metric carry `error.type`, and the turn's, the process's and
/// the run's root spans an error status (they were left unset, which back
/// ends read as success).
#[test]
fn a_failed_turn_and_its_failed_run_export_error_statuses() {
    let receiver = Receiver::start();
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(
        ws.path().join("loopbox.toml"),
        "[shell]\nallow = [[\"true\"]]\n\n[agent]\ncommand = [\"false\"]\nprompt_input = \"stdin\"\nwritable = []\npass_env = []\n",
    )
    .unwrap();
    let probe = common::probe().to_string_lossy().into_owned();
    let input = r#"{"op": "echo", "then": "inject", "message": "go on"}"#;
    let o = traced(
        ws.path(),
        &receiver,
        &["run", &probe, "--input", input, "--json"],
    );
    let run: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stderr)));
    assert_eq!(run["status"], json!("failed"), "{run}");
    let got = receiver.take();
    let spans = spans(&got);
    println!("{}", tree(&spans));
    let turn = find(&spans, "invoke_agent false");
    assert_eq!(turn.status, 2, "{turn:#?}");
    for (k, v) in [
        ("gen_ai.operation.name", json!("invoke_agent")),
        // A program of the user's own: its name as a custom provider, never none.
        ("gen_ai.provider.name", json!("false")),
        ("gen_ai.agent.name", json!("false")),
        ("error.type", json!("exit")),
    ] {
        assert_eq!(turn.attrs.get(k), Some(&v), "{k}: {turn:#?}");
    }
    let process = find(&spans, "loopbox run");
    assert_eq!(process.status, 2, "{process:#?}");
    assert_eq!(
        process.attrs.get("loopbox.run.status"),
        Some(&json!("failed"))
    );
    let root = find(&spans, &format!("loopbox run {probe}"));
    assert_eq!(root.status, 2, "{root:#?}");
    let points = metric_points(&got, "gen_ai.client.operation.duration");
    assert!(
        points
            .iter()
            .any(|(_, a)| a.get("error.type") == Some(&json!("exit"))
                && a.get("gen_ai.provider.name") == Some(&json!("false"))),
        "{points:?}"
    );
}

#[test]
fn each_hook_event_of_a_session_writes_into_the_sessions_trace() {
    let receiver = Receiver::start();
    let ws = tempfile::tempdir().unwrap();
    let d = ws.path();
    let stop = json!({"session_id": "otel-1", "transcript_path": d.join("none.jsonl"), "cwd": d,
        "permission_mode": "default", "hook_event_name": "Stop", "stop_hook_active": false,
        "last_assistant_message": "still working"});
    let hook = || {
        common::feed(
            trusted_command(d)
                .args([
                    "hook",
                    "claude-code",
                    "--policy",
                    "builtin:ralph",
                    "--input",
                ])
                .arg(r#"{"prompt": "Fix it.", "completion_promise": "DONE"}"#)
                .env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint())
                .env(
                    "LOOPBOX_CACHE_DIR",
                    std::env::temp_dir().join("loopbox-hook-test-cache"),
                )
                .current_dir(d),
            stop.to_string().as_bytes(),
        )
    };
    let first = hook();
    assert_eq!(
        first.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let first_spans = spans(&receiver.take());
    let root = find(&first_spans, "loopbox run builtin:ralph");
    let event = find(&first_spans, "loopbox hook Stop");
    assert_eq!(event.parent, root.id);
    // The second event, another process: the same trace, under the same root, written once.
    let second = hook();
    assert_eq!(
        second.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    let later = spans(&receiver.take());
    let hook_span = find(&later, "loopbox hook Stop");
    assert_eq!(
        (&hook_span.trace, &hook_span.parent),
        (&root.trace, &root.id)
    );
    assert!(
        later.iter().all(|s| s.name != "loopbox run builtin:ralph"),
        "the root is written once: {later:#?}"
    );
    // Its event's span is under it.
    assert_eq!(find(&later, "event turn-complete").parent, hook_span.id);
}

#[test]
fn telemetry_it_cannot_send_is_said_once_and_changes_nothing_else() {
    let ws = tempfile::tempdir().unwrap();
    let probe = common::probe().to_string_lossy().into_owned();
    let o = trusted_command(ws.path())
        .arg("-C")
        .arg(ws.path())
        .args(["run", &probe, "--input", r#"{"op": "echo"}"#, "--json"])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
        .env("CI", "true")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(common::code(&o), 0, "{err}");
    assert!(
        err.contains("warning: OpenTelemetry is off: OTEL_EXPORTER_OTLP_PROTOCOL = `http/json`: loopbox sends OTLP over HTTP with protobuf only (what collectors take by default); set it to http/protobuf"),
        "{err}"
    );
    // A collector that is not there costs at most the export timeout, and the run is unchanged.
    let t = std::time::Instant::now();
    let o = trusted_command(ws.path())
        .arg("-C")
        .arg(ws.path())
        .args(["run", &probe, "--input", r#"{"op": "echo"}"#, "--json"])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
        .env("OTEL_EXPORTER_OTLP_TIMEOUT", "500")
        .env("CI", "true")
        .output()
        .unwrap();
    assert_eq!(
        common::code(&o),
        0,
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        t.elapsed() < std::time::Duration::from_secs(10),
        "{:?}",
        t.elapsed()
    );
}

/// A connection through the egress proxy is a span of its run, under the
/// run's root: its destination and decision, never its path.
#[test]
fn a_connection_through_the_proxy_is_a_span_of_its_run() {
    let receiver = Receiver::start();
    let (ws, _bin) = workspace();
    let config = ws.path().join("loopbox.toml");
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("[shell]\n", "[shell]\nscripts = true\n")
        + &format!("\n[network]\nallow = [\"127.0.0.1:{}\"]\n", receiver.port);
    std::fs::write(&config, text).unwrap();
    let probe = common::probe().to_string_lossy().into_owned();
    let source = format!(
        "curl -s -o /dev/null --max-time 10 http://127.0.0.1:{}/secret-path; curl -s -o /dev/null --max-time 10 http://127.0.0.3:{}/",
        receiver.port, receiver.port
    );
    let input = json!({"op": "script", "source": source}).to_string();
    let o = traced(
        ws.path(),
        &receiver,
        &["run", &probe, "--input", &input, "--json"],
    );
    assert_eq!(
        common::code(&o),
        0,
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let run: Value = serde_json::from_slice(&o.stdout).unwrap();
    let id = run["run_id"].as_str().unwrap();
    let spans = spans(&receiver.take());
    let (_, root_id) = loopbox::telemetry::run_ids(id);
    let allowed = find(&spans, &format!("connect 127.0.0.1:{}", receiver.port));
    assert_eq!(allowed.parent, root_id.to_string(), "{allowed:#?}");
    assert_eq!(allowed.attrs["server.address"], json!("127.0.0.1"));
    assert_eq!(allowed.attrs["loopbox.network.allowed"], json!(true));
    assert_eq!(allowed.attrs["loopbox.network.side"], json!("commands"));
    let refused = find(&spans, &format!("connect 127.0.0.3:{}", receiver.port));
    assert_eq!(refused.attrs["loopbox.network.allowed"], json!(false));
    assert!(!format!("{spans:?}").contains("secret-path"), "{spans:#?}");
}

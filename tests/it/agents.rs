//! Agent runners through the runtime: the OpenAI-compatible runner against a
//! small chat-completions server on loopback (the one part here standing in
//! for a hosted model), and the per-run prompt budget.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use loopbox_tests::*;
use serde_json::{Value, json};

/// A chat-completions server: records each request (its Authorization header and
/// JSON body) and answers "reply N (M messages)"; `/slow` paths never answer in time,
/// `/broken` ones answer 500.
struct Server {
    port: u16,
    seen: Arc<Mutex<Vec<(String, Value)>>>,
}

fn serve() -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen: Arc<Mutex<Vec<(String, Value)>>> = Arc::default();
    let log = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut request_line = String::new();
            reader.read_line(&mut request_line).unwrap();
            let (mut length, mut auth) = (0usize, String::new());
            loop {
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                let line = line.trim_end();
                if line.is_empty() {
                    break;
                }
                let (name, value) = line.split_once(':').unwrap();
                match name.to_ascii_lowercase().as_str() {
                    "content-length" => length = value.trim().parse().unwrap(),
                    "authorization" => auth = value.trim().to_string(),
                    _ => {}
                }
            }
            let mut body = vec![0u8; length];
            reader.read_exact(&mut body).unwrap();
            let body: Value = serde_json::from_slice(&body).unwrap();
            let n = {
                let mut seen = log.lock().unwrap();
                seen.push((auth, body.clone()));
                seen.len()
            };
            if request_line.contains("/slow/") {
                std::thread::sleep(Duration::from_secs(3));
                continue;
            }
            let (status, answer) = if request_line.contains("/broken/") {
                (
                    "500 Internal Server Error",
                    json!({"error": {"message": "model overloaded"}}),
                )
            } else {
                let count = body["messages"].as_array().unwrap().len();
                (
                    "200 OK",
                    json!({"choices": [{"message": {"role": "assistant", "content": format!("reply {n} ({count} messages)")}}]}),
                )
            };
            let text = answer.to_string();
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
                text.len()
            );
        }
    });
    Server { port, seen }
}

fn config(port: u16, path: &str, extra: &str) -> String {
    format!(
        "[agent]\nrunner = \"openai\"\ntimeout_ms = 1000\n{extra}\n[agent.openai]\nbase_url = \"http://127.0.0.1:{port}{path}/v1\"\nmodel = \"test-model\"\napi_key_env = \"LOOPBOX_TEST_AGENT_KEY\"\nsystem = \"Be brief.\""
    )
}

fn set_key() {
    #[allow(clippy::disallowed_methods)]
    // the host reads it from its own environment, in this process
    // SAFETY: every test in this file sets the same value; none removes it.
    unsafe {
        std::env::set_var("LOOPBOX_TEST_AGENT_KEY", "test-secret")
    };
}

#[tokio::test]
async fn openai_runner_keeps_the_conversation_per_session() {
    set_key();
    let server = serve();
    let ws = Workspace::new();
    let ctx = ws.run(&load("probe"), &config(server.port, "", ""));
    let first = probe(&ctx, json!({"op": "prompt", "text": "hello; $(rm -rf /)"}))
        .await
        .unwrap();
    assert_eq!(first["ok"]["stdout"], "reply 1 (2 messages)", "{first}");
    let session = first["ok"]["session"].as_str().unwrap().to_string();
    let second = probe(
        &ctx,
        json!({"op": "prompt", "text": "again", "session": session}),
    )
    .await
    .unwrap();
    assert_eq!(
        (
            second["ok"]["stdout"].as_str(),
            second["ok"]["session"].as_str()
        ),
        (Some("reply 2 (4 messages)"), Some(session.as_str()))
    );

    let seen = server.seen.lock().unwrap().clone();
    assert_eq!(seen[0].0, "Bearer test-secret");
    assert_eq!(seen[0].1["model"], "test-model");
    assert_eq!(
        seen[0].1["messages"],
        json!([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello; $(rm -rf /)"}])
    );
    let roles: Vec<&str> = seen[1].1["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["system", "user", "assistant", "user"]);
    // The conversation is in the store, not in the config or the log.
    let log = log_messages(&ctx).join("\n");
    assert!(!log.contains("test-secret"), "{log}");

    let v = probe(
        &ctx,
        json!({"op": "prompt", "text": "x", "session": "oa-unknown"}),
    )
    .await
    .unwrap();
    assert_eq!(v["err"]["kind"], "unavailable");
    assert!(
        v["err"]["message"]
            .as_str()
            .unwrap()
            .contains("no conversation `oa-unknown`"),
        "{v}"
    );
}

#[tokio::test]
async fn openai_runner_failures_are_unavailable_with_the_reason() {
    set_key();
    let server = serve();
    let ws = Workspace::new();
    let broken = ws.run(&load("probe"), &config(server.port, "/broken", ""));
    let v = probe(&broken, json!({"op": "prompt", "text": "x"}))
        .await
        .unwrap();
    assert!(
        v["err"]["message"]
            .as_str()
            .unwrap()
            .contains("answered 500")
            && v["err"]["message"]
                .as_str()
                .unwrap()
                .contains("model overloaded"),
        "{v}"
    );
    let slow = ws.run(&load("probe"), &config(server.port, "/slow", ""));
    let started = std::time::Instant::now();
    let v = probe(&slow, json!({"op": "prompt", "text": "x"}))
        .await
        .unwrap();
    assert!(
        v["err"]["message"]
            .as_str()
            .unwrap()
            .contains("did not answer within"),
        "{v}"
    );
    assert!(started.elapsed() < Duration::from_secs(3));
    let no_key = ws.run(
        &load("probe"),
        &config(server.port, "", "").replace("LOOPBOX_TEST_AGENT_KEY", "LOOPBOX_TEST_UNSET_KEY"),
    );
    let v = probe(&no_key, json!({"op": "prompt", "text": "x"}))
        .await
        .unwrap();
    assert!(
        v["err"]["message"]
            .as_str()
            .unwrap()
            .contains("`LOOPBOX_TEST_UNSET_KEY` (agent.openai.api_key_env) is not set"),
        "{v}"
    );
    let nobody = ws.run(&load("probe"), &config(1, "", ""));
    assert_eq!(
        probe(&nobody, json!({"op": "prompt", "text": "x"}))
            .await
            .unwrap()["err"]["kind"],
        "unavailable"
    );
}

#[tokio::test]
async fn prompts_have_a_per_run_budget() {
    set_key();
    let server = serve();
    let ws = Workspace::new();
    let ctx = ws.run(&load("probe"), &config(server.port, "", "max_prompts = 2"));
    for _ in 0..2 {
        assert!(
            probe(&ctx, json!({"op": "prompt", "text": "x"}))
                .await
                .unwrap()["ok"]
                .is_object()
        );
    }
    let v = probe(&ctx, json!({"op": "prompt", "text": "x"}))
        .await
        .unwrap();
    assert_eq!(v["err"]["kind"], "budget-exhausted");
    assert!(
        v["err"]["message"]
            .as_str()
            .unwrap()
            .contains("agent.max_prompts"),
        "{v}"
    );
    assert_eq!(server.seen.lock().unwrap().len(), 2);
}

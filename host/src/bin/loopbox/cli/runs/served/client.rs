//! The HTTP client of `loopbox runs --server URL`: the server's JSON API
//! (docs/serve.md, `loopbox::serve::api`) over ureq, with the token from
//! `--token-file` or `LOOPBOX_TOKEN`. The token travels in the
//! `Authorization` header only: it is never printed, never part of an error,
//! never on a command line. The server's refusals become errors that say
//! what to do next, in its own words where it has them.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use super::super::super::{Failure, exit};
use loopbox::ui::one_line;

/// How long to wait for the server to accept a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long an act may take (a cancel waits up to 10 s for its driver).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(60);

/// The server's API, reached as one token.
pub struct Client {
    agent: ureq::Agent,
    /// A stream's agent: no deadline on the whole answer.
    streams: ureq::Agent,
    pub url: String,
    auth: String,
}

/// The token a command uses: the file's first line, else `LOOPBOX_TOKEN`.
fn token(url: &str, file: Option<&Path>) -> Result<String, Failure> {
    let token = match file {
        Some(p) => {
            let text = loopbox::files::read_text(p, 64 * 1024, "--token-file")
                .map_err(|e| Failure::usage(anyhow::anyhow!("{e}")))?;
            text.lines().next().unwrap_or_default().trim().to_string()
        }
        None => std::env::var("LOOPBOX_TOKEN")
            .unwrap_or_default()
            .trim()
            .to_string(),
    };
    if token.is_empty() {
        let whence = match file {
            Some(p) => format!("`{}` (--token-file) holds no token", p.display()),
            None => "LOOPBOX_TOKEN is not set".to_string(),
        };
        return Err(Failure::usage(anyhow::anyhow!(
            "{whence}: set LOOPBOX_TOKEN to a token of the server at {url} (an admin of your tenant makes one: `loopbox serve token create --tenant T --role approver --name NAME` on the server, or the dashboard's Tokens page), or give --token-file PATH"
        )));
    }
    // A header carries visible ASCII only; say so without showing the token.
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(Failure::usage(anyhow::anyhow!(
            "the token (from {}) has characters no token has: copy it again from `loopbox serve token create`",
            file.map_or("LOOPBOX_TOKEN".to_string(), |p| format!(
                "`{}`",
                p.display()
            ))
        )));
    }
    Ok(token)
}

impl Client {
    pub fn new(url: &str, token_file: Option<&Path>) -> Result<Client, Failure> {
        let url = loopbox::serve::url::check(url)
            .map_err(|e| Failure::usage(e.context("--server (or LOOPBOX_SERVER)")))?
            .to_string();
        let token = token(&url, token_file)?;
        if url.starts_with("http://") && !loopback(&url) {
            loopbox::errln!(
                "warning: the token goes to {url} unencrypted (http://): give the server's https:// URL when it has one"
            );
        }
        let agent = |answer: Option<Duration>| -> ureq::Agent {
            ureq::Agent::config_builder()
                .timeout_connect(Some(CONNECT_TIMEOUT))
                .timeout_global(answer)
                .http_status_as_error(false)
                .max_redirects(0)
                .user_agent(concat!("loopbox/", env!("CARGO_PKG_VERSION")))
                .build()
                .into()
        };
        Ok(Client {
            agent: agent(Some(ANSWER_TIMEOUT)),
            streams: agent(None),
            url,
            auth: format!("Bearer {token}"),
        })
    }

    /// `GET PATH`: its JSON.
    pub fn get(&self, path: &str) -> Result<Value, Failure> {
        let answer = self
            .agent
            .get(&format!("{}{path}", self.url))
            .header("Authorization", &self.auth)
            .call();
        self.json(answer)
    }

    /// `POST PATH` with `body`: its JSON.
    pub fn post(&self, path: &str, body: &Value) -> Result<Value, Failure> {
        let answer = self
            .agent
            .post(&format!("{}{path}", self.url))
            .header("Authorization", &self.auth)
            .send_json(body);
        self.json(answer)
    }

    /// `GET PATH` as a stream of Server-Sent Events, read as they come.
    pub fn events(&self, path: &str) -> Result<Events, Failure> {
        let answer = self
            .streams
            .get(&format!("{}{path}", self.url))
            .header("Authorization", &self.auth)
            .header("Accept", "text/event-stream")
            .call()
            .map_err(|e| self.unreachable(e))?;
        if !answer.status().is_success() {
            return Err(self.refused(answer));
        }
        Ok(Events {
            lines: BufReader::new(Box::new(answer.into_body().into_reader())),
        })
    }

    fn json(
        &self,
        answer: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> Result<Value, Failure> {
        let mut answer = answer.map_err(|e| self.unreachable(e))?;
        if !answer.status().is_success() {
            return Err(self.refused(answer));
        }
        answer.body_mut().read_json::<Value>().map_err(|e| {
            Failure::internal(anyhow::anyhow!(
                "the server at {} answered with something that is not the API's JSON ({e}): is it a loopbox serve?",
                self.url
            ))
        })
    }

    /// The server could not be asked at all.
    fn unreachable(&self, e: ureq::Error) -> Failure {
        Failure {
            code: exit::INTERNAL,
            error: anyhow::anyhow!(
                "cannot reach the server at {}: {e}; is `loopbox serve` running there, and is the URL right (--server, LOOPBOX_SERVER)?",
                self.url
            ),
        }
    }

    /// The server said no: its words, and what to do next.
    fn refused(&self, mut answer: ureq::http::Response<ureq::Body>) -> Failure {
        let status = answer.status().as_u16();
        let said = answer
            .body_mut()
            .with_config()
            .limit(64 * 1024)
            .read_json::<Value>()
            .ok()
            .and_then(|v| v["error"].as_str().map(String::from));
        let url = &self.url;
        let Some(said) = said else {
            return Failure::internal(anyhow::anyhow!(
                "the server at {url} answered HTTP {status} without the API's JSON error: is it a loopbox serve (of this version)?"
            ));
        };
        let said = one_line(&said);
        let (code, error) = match status {
            401 => (
                exit::USAGE,
                format!(
                    "the server at {url} refused the token: {said}; set LOOPBOX_TOKEN to a token of this server (an admin makes one: `loopbox serve token create --tenant T --role ROLE --name NAME`)"
                ),
            ),
            400 | 403 | 404 | 413 => (exit::USAGE, said),
            409 | 429 | 503 => (exit::FAILURE, said),
            _ => (
                exit::INTERNAL,
                format!("the server at {url} failed (HTTP {status}): {said}"),
            ),
        };
        Failure {
            code,
            error: anyhow::anyhow!("{error}"),
        }
    }
}

/// Whether the URL's host is this machine.
fn loopback(url: &str) -> bool {
    let host = url
        .split("://")
        .nth(1)
        .unwrap_or_default()
        .split('/')
        .next()
        .unwrap_or_default();
    let name = match host.rsplit_once(':') {
        Some((h, p)) if p.chars().all(|c| c.is_ascii_digit()) => h,
        _ => host,
    };
    let name = name.trim_start_matches('[').trim_end_matches(']');
    name == "localhost"
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// One Server-Sent Event: its type (`message` when none) and data.
pub struct Event {
    pub kind: String,
    pub data: String,
}

/// The events of a stream, as they arrive.
pub struct Events {
    lines: BufReader<Box<dyn Read>>,
}

impl Iterator for Events {
    type Item = Result<Event, Failure>;

    fn next(&mut self) -> Option<Self::Item> {
        let mut kind = String::new();
        let mut data = String::new();
        let mut line = String::new();
        loop {
            line.clear();
            match self.lines.read_line(&mut line) {
                Ok(0) => return None,
                Ok(_) => {}
                Err(e) => {
                    return Some(Err(Failure::internal(anyhow::anyhow!(
                        "the server's stream broke off: {e}"
                    ))));
                }
            }
            let l = line.trim_end_matches(['\r', '\n']);
            if l.is_empty() {
                if data.is_empty() && kind.is_empty() {
                    continue;
                }
                if kind.is_empty() {
                    kind = "message".into();
                }
                return Some(Ok(Event { kind, data }));
            }
            if let Some(v) = l.strip_prefix("event:") {
                kind = v.trim_start().to_string();
            } else if let Some(v) = l.strip_prefix("data:") {
                if !data.is_empty() {
                    data.push('\n');
                }
                data.push_str(v.strip_prefix(' ').unwrap_or(v));
            }
            // `id:`, `retry:` and comments (the keep-alives) need nothing here.
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_urls_are_told_apart() {
        for u in [
            "http://127.0.0.1:7300",
            "http://localhost",
            "http://[::1]:80",
        ] {
            assert!(loopback(u), "{u}");
        }
        for u in ["http://10.0.0.5:7300", "http://lb.example.com"] {
            assert!(!loopback(u), "{u}");
        }
    }

    #[test]
    fn events_are_read_as_they_come() {
        let raw =
            ": keep-alive\n\nevent: log\nid: 3\ndata: {\"seq\":3}\n\nevent: end\ndata: {}\n\n";
        let events = Events {
            lines: BufReader::new(Box::new(std::io::Cursor::new(raw.as_bytes().to_vec()))),
        };
        let got: Vec<(String, String)> = events
            .map(|e| e.map(|e| (e.kind, e.data)).map_err(|f| f.error.to_string()))
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(
            got,
            [
                ("log".to_string(), "{\"seq\":3}".to_string()),
                ("end".to_string(), "{}".to_string())
            ]
        );
    }
}

//! The URL people reach this server at. A server (or a `loopbox worker`)
//! sets it once at its start ([`crate::ui::set_server_url`]); the messages a
//! served run writes (its waiting summary, its log) and the dashboard then
//! print commands that work as printed, `--server URL` included
//! ([`crate::ui::runs_command`]). A `loopbox run` process never sets it: its
//! messages name the workspace's own commands.

use std::net::SocketAddr;

use anyhow::{Result, bail};

/// A server URL as `--server` and `server.url` take it: `http://` or
/// `https://`, a host, no query; returned without its trailing `/`.
pub fn check(url: &str) -> Result<&str> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"));
    let Some(rest) = rest else {
        bail!(
            "`{}` is not a server URL: give it with its scheme, http://HOST:PORT or https://HOST",
            crate::ui::one_line(url)
        );
    };
    if rest.is_empty() || rest.starts_with('/') || rest.contains(['?', '#', ' ', '@']) {
        bail!(
            "`{}` is not a server URL: give http://HOST:PORT or https://HOST (no user, query or fragment)",
            crate::ui::one_line(url)
        );
    }
    Ok(url.trim_end_matches('/'))
}

/// The URL a server listening at `bound` is reached at: `url` (its
/// `server.url`), else `http://` and the address (this machine's name for an
/// unspecified one).
pub fn of_server(url: Option<&str>, bound: SocketAddr) -> String {
    if let Some(u) = url {
        return u.trim_end_matches('/').to_string();
    }
    if bound.ip().is_unspecified() {
        return format!("http://{}:{}", host_name(), bound.port());
    }
    format!("http://{bound}")
}

/// The URL a `loopbox worker` prints: `url` (`server.url`), else `env`
/// (`LOOPBOX_SERVER`), else where the config says the server listens
/// (`listen`); none when that is a port picked at start (`:0`) or every
/// address (whose host name is the server's machine's, not the worker's).
pub fn of_worker(url: Option<&str>, env: Option<&str>, listen: SocketAddr) -> Option<String> {
    if let Some(u) = url {
        return Some(u.trim_end_matches('/').to_string());
    }
    if let Some(u) = env.and_then(|u| check(u).ok()) {
        return Some(u.to_string());
    }
    (listen.port() != 0 && !listen.ip().is_unspecified()).then(|| of_server(None, listen))
}

/// This machine's host name (`localhost` when it has none).
fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into a buffer we own.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(0);
    match std::str::from_utf8(&buf[..end]) {
        Ok(h) if ok && !h.is_empty() => h.to_string(),
        _ => "localhost".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_checked_and_named_in_commands() {
        assert_eq!(
            check("http://127.0.0.1:7300/").unwrap(),
            "http://127.0.0.1:7300"
        );
        assert_eq!(
            check("https://lb.example.com").unwrap(),
            "https://lb.example.com"
        );
        for bad in [
            "127.0.0.1:7300",
            "ftp://x",
            "http://",
            "http://u:p@h",
            "http://h?x=1",
        ] {
            assert!(check(bad).is_err(), "{bad}");
        }
        let at = |a: &str| a.parse::<SocketAddr>().unwrap();
        assert_eq!(
            of_server(None, at("127.0.0.1:7301")),
            "http://127.0.0.1:7301"
        );
        assert_eq!(
            of_worker(None, None, at("127.0.0.1:7300")).as_deref(),
            Some("http://127.0.0.1:7300")
        );
        assert_eq!(of_worker(None, None, at("127.0.0.1:0")), None);
        assert_eq!(
            of_worker(None, Some("http://127.0.0.1:7302/"), at("127.0.0.1:0")).as_deref(),
            Some("http://127.0.0.1:7302")
        );
        assert_eq!(of_worker(None, None, at("0.0.0.0:7300")), None);
        assert_eq!(
            of_worker(
                Some("https://lb.example.com/"),
                Some("http://ignored:1"),
                at("127.0.0.1:0")
            )
            .as_deref(),
            Some("https://lb.example.com")
        );
        assert_eq!(
            crate::ui::runs_command_at(Some("http://h:1"), "approve r1"),
            "loopbox runs approve r1 --server http://h:1"
        );
        assert_eq!(
            crate::ui::runs_command_at(None, "approve r1"),
            "loopbox runs approve r1"
        );
    }
}

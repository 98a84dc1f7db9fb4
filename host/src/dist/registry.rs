//! A client for OCI registries (the distribution spec's HTTP API), holding
//! Wasm components the way the Wasm OCI artifact layout has them (as `wkg` and
//! `oci-wasm` write them): an image manifest whose config is
//! `application/vnd.wasm.config.v0+json` and whose one layer is the
//! component, `application/wasm`.
//!
//! Everything it receives is bounded and checked: a manifest is at most
//! [`MAX_MANIFEST_BYTES`], a component at most `files::MAX_COMPONENT_BYTES`
//! and exactly its declared size, and every blob must hash to its digest,
//! so a registry cannot grow loopbox's memory or swap what it serves.
//! Each phase of a request is bounded: [`CONNECT_TIMEOUT`] to connect,
//! [`FIRST_BYTE_TIMEOUT`] for the answer to start, [`IDLE_TIMEOUT`] between
//! two reads or writes, [`TIMEOUT`] in all; a timeout names the phase and the
//! host, and a component's download shows its bytes so far on stderr.
//!
//! A login comes from `LOOPBOX_REGISTRY_USER` and `LOOPBOX_REGISTRY_PASSWORD`,
//! and goes only to the registry `LOOPBOX_REGISTRY_HOST` names, and to its token
//! service over HTTPS (plain HTTP only when the registry and the token service are
//! both on this machine), so adding a policy from another registry never hands it
//! over. Whatever the registry sends on to another origin (a redirect, an upload
//! `Location`) goes there without credentials and never authenticates there; an
//! HTTPS registry's upload sent on to plain HTTP elsewhere is refused. Otherwise
//! requests are anonymous (with the bearer-token dance public registries use).

use std::time::Duration;

use anyhow::{Context, Result, bail};
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use ureq::http::{Method, Request, Response, StatusCode};

use super::reference::{Reference, is_sha256};
use crate::files::MAX_COMPONENT_BYTES;

pub const MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
pub const INDEX_MEDIA_TYPE: &str = "application/vnd.oci.image.index.v1+json";
pub const CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
pub const LAYER_MEDIA_TYPE: &str = "application/wasm";
/// The largest manifest or config blob read.
pub const MAX_MANIFEST_BYTES: u64 = 4 << 20;
/// The longest one request (including its body) may take in all.
pub const TIMEOUT: Duration = Duration::from_secs(900);
/// The longest loopbox waits to connect (name lookup, TCP, TLS).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest loopbox waits for an answer to start once the request is sent.
pub const FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(15);
/// The longest a transfer may stall between two reads or two writes.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(15);
/// Redirects followed for one request.
const MAX_REDIRECTS: usize = 5;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    pub media_type: String,
    pub digest: String,
    pub size: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<std::collections::BTreeMap<String, String>>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    pub schema_version: u32,
    #[serde(default)]
    pub media_type: Option<String>,
    pub config: Descriptor,
    pub layers: Vec<Descriptor>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<std::collections::BTreeMap<String, String>>,
}

/// The Wasm artifact config (`application/vnd.wasm.config.v0+json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WasmConfig {
    pub created: String,
    pub author: Option<String>,
    pub architecture: String,
    pub os: String,
    pub layer_digests: Vec<String>,
    pub component: Option<ComponentInfo>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ComponentInfo {
    pub exports: Vec<String>,
    pub imports: Vec<String>,
    pub target: Option<String>,
}

/// A component fetched and checked against its digests.
#[derive(Debug)]
pub struct Pulled {
    /// `sha256:...` of the manifest, as the registry names it by digest.
    pub manifest: String,
    /// `sha256:...` of the component (the layer).
    pub layer: String,
    pub component: Vec<u8>,
}

pub fn sha256(bytes: &[u8]) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, bytes);
    let hex: String = d.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

pub struct Registry {
    agent: ureq::Agent,
    base: String,
    token: Option<String>,
    /// `user:password` in base64, for this registry only.
    login: Option<String>,
    loopback: bool,
}

const LOGIN_HINT: &str = "set LOOPBOX_REGISTRY_HOST (this registry's host[:port]), LOOPBOX_REGISTRY_USER and LOOPBOX_REGISTRY_PASSWORD";

/// The login for `registry` from `env`: only when `LOOPBOX_REGISTRY_HOST` names it.
pub fn login_for(registry: &str, env: impl Fn(&str) -> Option<String>) -> Option<String> {
    if env("LOOPBOX_REGISTRY_HOST")? != registry {
        return None;
    }
    let (user, password) = (
        env("LOOPBOX_REGISTRY_USER")?,
        env("LOOPBOX_REGISTRY_PASSWORD")?,
    );
    Some(base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}")))
}

impl Registry {
    pub fn new(reference: &Reference) -> Registry {
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(TIMEOUT))
            .timeout_resolve(Some(CONNECT_TIMEOUT))
            .timeout_connect(Some(CONNECT_TIMEOUT))
            .timeout_send_request(Some(IDLE_TIMEOUT))
            .timeout_recv_response(Some(FIRST_BYTE_TIMEOUT))
            .timeout_per_read(Some(IDLE_TIMEOUT))
            .timeout_per_write(Some(IDLE_TIMEOUT))
            // Redirects are followed by `send`, which decides what goes where.
            .max_redirects(0)
            .http_status_as_error(false)
            .user_agent(concat!("loopbox/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        Registry {
            agent,
            base: format!("{}://{}", reference.scheme(), reference.registry),
            token: None,
            login: login_for(&reference.registry, |k| std::env::var(k).ok()),
            loopback: reference.scheme() == "http",
        }
    }

    /// Fetch the component `r` names. With `manifest` (a locked digest) the
    /// manifest must be exactly that one, whatever the tag says now.
    pub fn pull(&mut self, r: &Reference, manifest: Option<&str>) -> Result<Pulled> {
        let by = manifest.unwrap_or(r.manifest_ref());
        let url = format!("{}/v2/{}/manifests/{by}", self.base, r.repository);
        let mut resp = self.send(
            Method::GET,
            &url,
            &[("Accept", MANIFEST_MEDIA_TYPE)],
            &[],
            &r.repository,
            "pull",
        )?;
        expect(&resp, &[StatusCode::OK], &url, r)?;
        let content_type = header(&resp, "content-type");
        let raw = read_body(
            &mut resp,
            MAX_MANIFEST_BYTES + 1,
            "the manifest",
            None,
            &url,
        )?;
        let digest = sha256(&raw);
        if let Some(want) = manifest.or(r.digest.as_deref())
            && digest != want
        {
            bail!(
                "the registry sent a manifest whose digest is {digest}, not the {want} asked for; nothing was installed"
            );
        }
        if content_type
            .as_deref()
            .is_some_and(|t| t.starts_with(INDEX_MEDIA_TYPE))
        {
            bail!("`{r}` is an image index (several images), not one Wasm component");
        }
        let m: Manifest = serde_json::from_slice(&raw)
            .context("the registry sent a manifest that is not an OCI image manifest")?;
        if m.media_type
            .as_deref()
            .is_some_and(|t| t != MANIFEST_MEDIA_TYPE)
        {
            bail!(
                "`{r}` is a `{}`, not an OCI image manifest of a Wasm component",
                m.media_type.unwrap_or_default()
            );
        }
        if m.config.media_type != CONFIG_MEDIA_TYPE {
            bail!(
                "`{r}` is not a Wasm component: its config is `{}`, not `{CONFIG_MEDIA_TYPE}` (is it a container image?)",
                m.config.media_type
            );
        }
        let [layer] = m.layers.as_slice() else {
            bail!(
                "`{r}` has {} layers; a Wasm component artifact has exactly one",
                m.layers.len()
            );
        };
        if layer.media_type != LAYER_MEDIA_TYPE {
            bail!(
                "`{r}`'s layer is `{}`, not `{LAYER_MEDIA_TYPE}`",
                layer.media_type
            );
        }
        if !is_sha256(&layer.digest) {
            bail!(
                "`{r}`'s layer digest `{}` is not a sha256 digest",
                layer.digest
            );
        }
        if layer.size > MAX_COMPONENT_BYTES {
            bail!(
                "`{r}`'s component is {} bytes; at most {MAX_COMPONENT_BYTES} are fetched",
                layer.size
            );
        }
        let component = self.blob(r, &layer.digest, layer.size)?;
        Ok(Pulled {
            manifest: digest,
            layer: layer.digest.clone(),
            component,
        })
    }

    fn blob(&mut self, r: &Reference, digest: &str, size: u64) -> Result<Vec<u8>> {
        let url = format!("{}/v2/{}/blobs/{digest}", self.base, r.repository);
        crate::errln!("fetching the component ({size} bytes) from {}", r.registry);
        let mut resp = self.send(Method::GET, &url, &[], &[], &r.repository, "pull")?;
        expect(&resp, &[StatusCode::OK], &url, r)?;
        let bytes = read_body(&mut resp, size + 1, "the component", Some(size), &url)?;
        if bytes.len() as u64 != size {
            bail!(
                "the registry sent {} bytes of the component; its manifest says {size}",
                bytes.len()
            );
        }
        let got = sha256(&bytes);
        if got != digest {
            bail!(
                "the registry sent a component that does not match its digest (expected {digest}, got {got}): \
                 its copy is corrupt or was tampered with; nothing was installed"
            );
        }
        Ok(bytes)
    }

    /// Push `component` as `r` (which must have a tag); returns the manifest digest.
    pub fn push(
        &mut self,
        r: &Reference,
        component: &[u8],
        info: ComponentInfo,
        annotations: std::collections::BTreeMap<String, String>,
    ) -> Result<String> {
        let Some(tag) = r.tag.as_deref().filter(|_| r.digest.is_none()) else {
            bail!("publish to a tag (oci://REGISTRY/REPOSITORY:TAG), not a digest");
        };
        let layer_digest = sha256(component);
        let config = WasmConfig {
            created: crate::ui::rfc3339(crate::db::now_ms()),
            author: None,
            architecture: "wasm".into(),
            os: "wasip2".into(),
            layer_digests: vec![layer_digest.clone()],
            component: Some(info),
        };
        let config_bytes = serde_json::to_vec(&config).expect("serializable");
        self.upload(r, &config_bytes)?;
        self.upload(r, component)?;
        let manifest = Manifest {
            schema_version: 2,
            media_type: Some(MANIFEST_MEDIA_TYPE.into()),
            config: Descriptor {
                media_type: CONFIG_MEDIA_TYPE.into(),
                digest: sha256(&config_bytes),
                size: config_bytes.len() as u64,
                annotations: None,
            },
            layers: vec![Descriptor {
                media_type: LAYER_MEDIA_TYPE.into(),
                digest: layer_digest,
                size: component.len() as u64,
                annotations: None,
            }],
            annotations: (!annotations.is_empty()).then_some(annotations),
        };
        let body = serde_json::to_vec(&manifest).expect("serializable");
        let url = format!("{}/v2/{}/manifests/{tag}", self.base, r.repository);
        let resp = self.send(
            Method::PUT,
            &url,
            &[("Content-Type", MANIFEST_MEDIA_TYPE)],
            &body,
            &r.repository,
            "pull,push",
        )?;
        expect(&resp, &[StatusCode::CREATED, StatusCode::OK], &url, r)?;
        Ok(sha256(&body))
    }

    /// Upload one blob unless the registry has it.
    fn upload(&mut self, r: &Reference, bytes: &[u8]) -> Result<()> {
        let digest = sha256(bytes);
        let head = format!("{}/v2/{}/blobs/{digest}", self.base, r.repository);
        let resp = self.send(Method::HEAD, &head, &[], &[], &r.repository, "pull,push")?;
        if resp.status() == StatusCode::OK {
            return Ok(());
        }
        let start = format!("{}/v2/{}/blobs/uploads/", self.base, r.repository);
        let resp = self.send(Method::POST, &start, &[], &[], &r.repository, "pull,push")?;
        expect(&resp, &[StatusCode::ACCEPTED], &start, r)?;
        let location = header(&resp, "location")
            .context("the registry started an upload but gave no Location")?;
        let location = self.upload_target(&start, &location)?;
        let sep = if location.contains('?') { '&' } else { '?' };
        let put = format!("{location}{sep}digest={digest}");
        crate::errln!(
            "uploading {} bytes to {}",
            bytes.len(),
            authority(&put).unwrap_or_default()
        );
        let resp = self.send(
            Method::PUT,
            &put,
            &[("Content-Type", "application/octet-stream")],
            bytes,
            &r.repository,
            "pull,push",
        )?;
        expect(&resp, &[StatusCode::CREATED], &put, r)?;
        Ok(())
    }

    /// Where an upload goes on: the `Location` an upload's start answered with,
    /// resolved against `start`. Elsewhere than the registry it gets no
    /// credentials (see [`Registry::send`]); elsewhere over plain HTTP from an
    /// HTTPS registry it is refused, since the component would travel in clear
    /// to a host the user never named.
    fn upload_target(&self, start: &str, location: &str) -> Result<String> {
        let target = resolve(start, location)?;
        if !same_origin(&self.base, &target)
            && self.base.starts_with("https://")
            && !target.starts_with("https://")
        {
            bail!(
                "the registry {} sent the upload on to `{}`, another host over plain HTTP; loopbox sends nothing there. \
                 Publish to a registry that keeps uploads on HTTPS",
                authority(&self.base).unwrap_or_default(),
                crate::ui::sanitize(&target)
            );
        }
        Ok(target)
    }

    /// One request, following redirects, with one retry after authenticating if
    /// the registry asks. Credentials (a login, or the token bought with one) go
    /// only to the registry's own origin: once a redirect leaves it, the request
    /// carries none, and a 401 from elsewhere is answered as it is, never with a
    /// login.
    fn send(
        &mut self,
        method: Method,
        url: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        repository: &str,
        actions: &str,
    ) -> Result<Response<ureq::Body>> {
        let mut url = url.to_string();
        let mut home = same_origin(&self.base, &url);
        let (mut authenticated, mut hops) = (false, 0);
        loop {
            let resp = self.request(&method, &url, headers, body, home)?;
            let status = resp.status();
            if status.is_redirection()
                && let Some(to) = header(&resp, "location")
            {
                hops += 1;
                if hops > MAX_REDIRECTS {
                    bail!(
                        "{method} {url}: the registry redirected more than {MAX_REDIRECTS} times"
                    );
                }
                let next = resolve(&url, &to)?;
                if url.starts_with("https://") && !next.starts_with("https://") {
                    bail!(
                        "{method} {url} was redirected to `{}`, from HTTPS to plain HTTP; loopbox does not follow that",
                        crate::ui::sanitize(&next)
                    );
                }
                home = home && same_origin(&self.base, &next);
                url = next;
                continue;
            }
            if status == StatusCode::UNAUTHORIZED && home && !authenticated {
                let challenge = header(&resp, "www-authenticate").unwrap_or_default();
                self.token = Some(self.authorize(&challenge, repository, actions)?);
                authenticated = true;
                continue;
            }
            return Ok(resp);
        }
    }

    /// One exchange; `credentials` adds the registry's `Authorization`.
    fn request(
        &self,
        method: &Method,
        url: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        credentials: bool,
    ) -> Result<Response<ureq::Body>> {
        let mut req = Request::builder().method(method.clone()).uri(url);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        if credentials && let Some(t) = &self.token {
            req = req.header("Authorization", t.as_str());
        }
        let req = req
            .body(body)
            .with_context(|| format!("`{url}` is not a URL"))?;
        self.agent
            .run(req)
            .map_err(|e| failed(e, method.as_str(), url))
    }

    /// An `Authorization` value for a `WWW-Authenticate` challenge.
    fn authorize(&self, challenge: &str, repository: &str, actions: &str) -> Result<String> {
        let creds = self.login.as_ref();
        let (scheme, params) = parse_challenge(challenge);
        if scheme.eq_ignore_ascii_case("basic") {
            return creds
                .map(|c| format!("Basic {c}"))
                .with_context(|| format!("the registry wants a login: {LOGIN_HINT}"));
        }
        if !scheme.eq_ignore_ascii_case("bearer") {
            bail!(
                "the registry refused access (401) with a challenge loopbox does not know: `{}`",
                crate::ui::sanitize(challenge)
            );
        }
        let realm = params
            .get("realm")
            .context("the registry's bearer challenge has no realm")?;
        let mut url = format!("{realm}?scope=repository:{repository}:{actions}");
        if let Some(service) = params.get("service") {
            url.push_str(&format!("&service={service}"));
        }
        // The login goes to a token service over HTTPS, or over plain HTTP only
        // when the registry and the token service are both on this machine.
        let local = self.loopback
            && realm.starts_with("http://")
            && authority(realm).is_some_and(|a| is_loopback(&a));
        if !(realm.starts_with("https://") || local) {
            bail!(
                "the registry's token service `{}` is not an HTTPS URL{}; loopbox sends nothing there",
                crate::ui::sanitize(realm),
                if realm.starts_with("http://") {
                    " (plain HTTP is used only when the registry and its token service are both on this machine)"
                } else {
                    ""
                }
            );
        }
        let mut req = Request::builder().method(Method::GET).uri(&url);
        if let Some(c) = creds {
            req = req.header("Authorization", format!("Basic {c}"));
        }
        let mut resp = self
            .agent
            .run(
                req.body(())
                    .with_context(|| format!("`{url}` is not a URL"))?,
            )
            .map_err(|e| failed(e, "GET", &url))?;
        if resp.status() != StatusCode::OK {
            bail!(
                "the registry's token service at {} answered {}: {LOGIN_HINT}",
                crate::ui::sanitize(realm),
                resp.status()
            );
        }
        #[derive(Deserialize)]
        struct Token {
            token: Option<String>,
            access_token: Option<String>,
        }
        let raw = read_body(&mut resp, 1 << 20, "the token", None, &url)?;
        let t: Token =
            serde_json::from_slice(&raw).context("the token service's answer is not JSON")?;
        t.token
            .or(t.access_token)
            .map(|t| format!("Bearer {t}"))
            .context("the token service gave no token")
    }
}

/// `host[:port]` of a URL, lower-cased (None when it has none).
fn authority(url: &str) -> Option<String> {
    let uri: ureq::http::Uri = url.parse().ok()?;
    uri.authority().map(|a| a.as_str().to_ascii_lowercase())
}

/// Scheme, host and port of a URL (the port filled in from the scheme).
fn origin(url: &str) -> Option<(String, String, u16)> {
    let uri: ureq::http::Uri = url.parse().ok()?;
    let scheme = uri.scheme_str()?.to_ascii_lowercase();
    let port = uri
        .port_u16()
        .unwrap_or(if scheme == "https" { 443 } else { 80 });
    Some((scheme, uri.host()?.to_ascii_lowercase(), port))
}

/// Whether two URLs share scheme, host and port (an unparsable one shares nothing).
fn same_origin(a: &str, b: &str) -> bool {
    matches!((origin(a), origin(b)), (Some(x), Some(y)) if x == y)
}

/// Whether `host[:port]` is this machine: `localhost`, 127.0.0.0/8 or `[::1]`.
fn is_loopback(authority: &str) -> bool {
    let host = match authority.rsplit_once(':') {
        Some((h, p)) if p.chars().all(|c| c.is_ascii_digit()) && !h.ends_with(':') => h,
        _ => authority,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// `location` (a `Location` header) as an absolute http(s) URL, relative to `base`.
fn resolve(base: &str, location: &str) -> Result<String> {
    let location = location.trim();
    let scheme = location.split_once(':').map(|(s, _)| s).filter(|s| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
    });
    if scheme.is_some_and(|s| !s.eq_ignore_ascii_case("http") && !s.eq_ignore_ascii_case("https")) {
        bail!(
            "the registry sent `{}` as a location, which is not an http(s) URL",
            crate::ui::sanitize(location)
        );
    }
    let url = if location.starts_with("http://") || location.starts_with("https://") {
        location.to_string()
    } else if let Some(rest) = location.strip_prefix("//") {
        let scheme = base.split_once("://").map_or("https", |(s, _)| s);
        format!("{scheme}://{rest}")
    } else {
        let (scheme, rest) = base
            .split_once("://")
            .with_context(|| format!("`{base}` is not a URL"))?;
        let host = rest.split('/').next().unwrap_or(rest);
        if location.starts_with('/') {
            format!("{scheme}://{host}{location}")
        } else {
            let path = base.split('?').next().unwrap_or(base);
            let dir = path.rsplit_once('/').map_or(path, |(d, _)| d);
            format!("{dir}/{location}")
        }
    };
    if origin(&url).is_none() {
        bail!(
            "the registry sent `{}` as a location, which is not an http(s) URL",
            crate::ui::sanitize(location)
        );
    }
    Ok(url)
}

/// A failed exchange with `url`; a timeout names its phase and the host.
fn failed(e: ureq::Error, method: &str, url: &str) -> anyhow::Error {
    let host = authority(url).unwrap_or_else(|| url.to_string());
    match e {
        ureq::Error::Timeout(t) => {
            let (phase, limit) = phase(t);
            anyhow::anyhow!(
                "{host} timed out {phase} (nothing for {} s; {method} {url}): check that the registry is up and reachable, then try again",
                limit.as_secs()
            )
        }
        e => anyhow::anyhow!("{method} {url}: {e}"),
    }
}

/// What a timeout was waiting for, and how long it waits.
fn phase(t: ureq::Timeout) -> (&'static str, Duration) {
    use ureq::Timeout as T;
    match t {
        T::Resolve => ("looking up its address", CONNECT_TIMEOUT),
        T::Connect => ("connecting", CONNECT_TIMEOUT),
        T::SendRequest | T::SendBody | T::Await100 | T::PerWrite => {
            ("sending the request", IDLE_TIMEOUT)
        }
        T::RecvResponse | T::PerRead => (
            "waiting for the first byte of its answer",
            FIRST_BYTE_TIMEOUT,
        ),
        T::RecvBody => ("reading its answer", IDLE_TIMEOUT),
        T::Global | T::PerCall => ("before the whole request was done", TIMEOUT),
        _ => ("during the request", TIMEOUT),
    }
}

/// `Bearer realm="...",service="..."` as its scheme and parameters.
pub fn parse_challenge(c: &str) -> (String, std::collections::BTreeMap<String, String>) {
    let (scheme, rest) = c.trim().split_once(' ').unwrap_or((c.trim(), ""));
    let mut params = std::collections::BTreeMap::new();
    let mut rest = rest.trim();
    while let Some((key, after)) = rest.split_once('=') {
        let key = key
            .trim()
            .trim_start_matches(',')
            .trim()
            .to_ascii_lowercase();
        let (value, next) = match after.strip_prefix('"') {
            Some(q) => match q.split_once('"') {
                Some((v, n)) => (v, n),
                None => (q, ""),
            },
            None => after.split_once(',').map_or((after, ""), |(v, n)| (v, n)),
        };
        params.insert(key, value.to_string());
        rest = next.trim_start_matches(',').trim();
    }
    (scheme.to_string(), params)
}

fn header(resp: &Response<ureq::Body>, name: &str) -> Option<String> {
    resp.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

fn expect(resp: &Response<ureq::Body>, ok: &[StatusCode], url: &str, r: &Reference) -> Result<()> {
    let status = resp.status();
    if ok.contains(&status) {
        return Ok(());
    }
    match status {
        StatusCode::NOT_FOUND => bail!("`{r}` is not in the registry ({url} answered 404)"),
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
            bail!("the registry refused access to `{r}` ({status}): {LOGIN_HINT}")
        }
        _ => bail!("{url} answered {status}"),
    }
}

/// The body, refused as soon as it reaches `cap` bytes (pass one more than the
/// most allowed). With `total` (a blob's declared size) the bytes so far are
/// shown on stderr, on the first data and then every second.
fn read_body(
    resp: &mut Response<ureq::Body>,
    cap: u64,
    what: &str,
    total: Option<u64>,
    url: &str,
) -> Result<Vec<u8>> {
    use std::io::Read;
    let mut reader = resp.body_mut().with_config().limit(cap).reader();
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    let mut shown: Option<std::time::Instant> = None;
    loop {
        match reader.read(&mut buf) {
            Ok(0) => return Ok(out),
            Ok(n) => {
                out.extend_from_slice(&buf[..n]);
                if let Some(total) = total
                    && shown.is_none_or(|t| t.elapsed() >= Duration::from_secs(1))
                {
                    crate::errln!("  {} of {total} bytes of {what}", out.len());
                    shown = Some(std::time::Instant::now());
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                let so_far = match total {
                    Some(t) => format!("{} of {t}", out.len()),
                    None => out.len().to_string(),
                };
                return Err(match ureq::Error::from(e) {
                    ureq::Error::BodyExceedsLimit(_) => anyhow::anyhow!(
                        "the registry sent more than {} bytes for {what}; nothing was installed",
                        cap - 1
                    ),
                    ureq::Error::Timeout(t) => anyhow::anyhow!(
                        "{} stopped sending {what} after {so_far} bytes: {} (GET {url}); try again, or check the registry",
                        authority(url).unwrap_or_default(),
                        match t {
                            ureq::Timeout::Global | ureq::Timeout::PerCall =>
                                format!("the download took over {} s in all", TIMEOUT.as_secs()),
                            _ => format!("nothing came for {} s", IDLE_TIMEOUT.as_secs()),
                        }
                    ),
                    e => anyhow::anyhow!(
                        "reading {what} from the registry failed after {so_far} bytes: {e}"
                    ),
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges_are_read_as_registries_write_them() {
        let (s, p) = parse_challenge(
            r#"Bearer realm="https://ghcr.io/token",service="ghcr.io",scope="repository:a/b:pull""#,
        );
        assert_eq!(s, "Bearer");
        assert_eq!(p["realm"], "https://ghcr.io/token");
        assert_eq!(p["service"], "ghcr.io");
        assert_eq!(p["scope"], "repository:a/b:pull");
        assert_eq!(parse_challenge("Basic realm=\"Registry\"").0, "Basic");
    }

    #[test]
    fn a_login_goes_only_to_the_registry_it_names() {
        let env = |host: &'static str| {
            move |k: &str| match k {
                "LOOPBOX_REGISTRY_HOST" => Some(host.to_string()),
                "LOOPBOX_REGISTRY_USER" => Some("me".to_string()),
                "LOOPBOX_REGISTRY_PASSWORD" => Some("pw".to_string()),
                _ => None,
            }
        };
        assert_eq!(
            login_for("ghcr.io", env("ghcr.io")).as_deref(),
            Some("bWU6cHc=")
        );
        assert_eq!(login_for("evil.example", env("ghcr.io")), None);
        assert_eq!(login_for("ghcr.io", |_| None), None);
    }

    #[test]
    fn credentials_stay_with_the_registry_origin() {
        assert!(same_origin(
            "http://127.0.0.1:5000/v2/",
            "http://127.0.0.1:5000/x"
        ));
        assert!(!same_origin(
            "http://127.0.0.1:5000/v2/",
            "http://127.0.0.2:5000/v2/"
        ));
        assert!(!same_origin(
            "http://127.0.0.1:5000/",
            "http://127.0.0.1:5001/"
        ));
        assert!(!same_origin("https://r.example/", "http://r.example/"));
        assert!(same_origin("https://r.example/", "https://R.example:443/a"));
        assert!(
            is_loopback("127.0.0.2:80") && is_loopback("localhost") && is_loopback("[::1]:5000")
        );
        assert!(!is_loopback("192.0.2.2:80") && !is_loopback("evil.example"));
        assert_eq!(
            resolve("http://h:1/v2/a/blobs/uploads/", "/up/1?x=y").unwrap(),
            "http://h:1/up/1?x=y"
        );
        assert_eq!(resolve("https://h/a/b", "//o/p").unwrap(), "https://o/p");
        assert!(resolve("http://h/", "file:///etc/passwd").is_err());

        let registry = |r: &str| Registry::new(&Reference::parse(r).unwrap());
        // An HTTPS registry's upload sent on to plain HTTP elsewhere: refused outright.
        let https = registry("oci://r.example/a/b:1");
        let e = https
            .upload_target(
                "https://r.example/v2/a/b/blobs/uploads/",
                "http://o.example/u",
            )
            .unwrap_err();
        assert!(
            e.to_string().contains("another host over plain HTTP"),
            "{e}"
        );
        assert!(
            https
                .upload_target(
                    "https://r.example/v2/a/b/blobs/uploads/",
                    "https://o.example/u"
                )
                .is_ok()
        );
    }

    #[test]
    fn digests_are_sha256_of_the_bytes() {
        assert_eq!(
            sha256(b""),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}

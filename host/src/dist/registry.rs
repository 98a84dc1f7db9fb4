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
//! Each request has [`TIMEOUT`] in all. A login comes from
//! `LOOPBOX_REGISTRY_USER` and `LOOPBOX_REGISTRY_PASSWORD`, and goes only to the
//! registry `LOOPBOX_REGISTRY_HOST` names (and its token service over HTTPS), so
//! adding a policy from another registry never hands it over; otherwise requests
//! are anonymous (with the bearer-token dance public registries use).

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
/// The longest one request (including its body) may take.
pub const TIMEOUT: Duration = Duration::from_secs(300);

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
            .timeout_connect(Some(Duration::from_secs(30)))
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
        let raw = read_limited(&mut resp, MAX_MANIFEST_BYTES + 1, "the manifest")?;
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
        let mut resp = self.send(Method::GET, &url, &[], &[], &r.repository, "pull")?;
        expect(&resp, &[StatusCode::OK], &url, r)?;
        let bytes = read_limited(&mut resp, size + 1, "the component")?;
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
        let location = if location.starts_with('/') {
            format!("{}{location}", self.base)
        } else {
            location
        };
        let sep = if location.contains('?') { '&' } else { '?' };
        let put = format!("{location}{sep}digest={digest}");
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

    /// One request, with one retry after authenticating if the registry asks.
    fn send(
        &mut self,
        method: Method,
        url: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        repository: &str,
        actions: &str,
    ) -> Result<Response<ureq::Body>> {
        for attempt in 0..2 {
            let mut req = Request::builder().method(method.clone()).uri(url);
            for (k, v) in headers {
                req = req.header(*k, *v);
            }
            if let Some(t) = &self.token {
                req = req.header("Authorization", t.as_str());
            }
            let req = req
                .body(body)
                .with_context(|| format!("`{url}` is not a URL"))?;
            let resp = self
                .agent
                .run(req)
                .map_err(|e| anyhow::anyhow!("{method} {url}: {e}"))?;
            if resp.status() != StatusCode::UNAUTHORIZED || attempt == 1 {
                return Ok(resp);
            }
            let challenge = header(&resp, "www-authenticate").unwrap_or_default();
            self.token = Some(self.authorize(&challenge, repository, actions)?);
        }
        unreachable!("the loop returns on its second pass")
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
                "the registry refused access (401) with a challenge loopbox does not know: `{challenge}`"
            );
        }
        let realm = params
            .get("realm")
            .context("the registry's bearer challenge has no realm")?;
        let mut url = format!("{realm}?scope=repository:{repository}:{actions}");
        if let Some(service) = params.get("service") {
            url.push_str(&format!("&service={service}"));
        }
        if !(realm.starts_with("https://") || (self.loopback && realm.starts_with("http://"))) {
            bail!(
                "the registry's token service `{realm}` is not an HTTPS URL; loopbox does not use it"
            );
        }
        let mut req = Request::builder().method(Method::GET).uri(&url);
        // The login goes to the token service only over HTTPS (or on this machine).
        if let Some(c) = creds {
            req = req.header("Authorization", format!("Basic {c}"));
        }
        let mut resp = self
            .agent
            .run(
                req.body(())
                    .with_context(|| format!("`{url}` is not a URL"))?,
            )
            .map_err(|e| anyhow::anyhow!("GET {url}: {e}"))?;
        if resp.status() != StatusCode::OK {
            bail!(
                "the registry's token service at {realm} answered {}: {LOGIN_HINT}",
                resp.status()
            );
        }
        #[derive(Deserialize)]
        struct Token {
            token: Option<String>,
            access_token: Option<String>,
        }
        let raw = read_limited(&mut resp, 1 << 20, "the token")?;
        let t: Token =
            serde_json::from_slice(&raw).context("the token service's answer is not JSON")?;
        t.token
            .or(t.access_token)
            .map(|t| format!("Bearer {t}"))
            .context("the token service gave no token")
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

/// The body, refused as soon as it reaches `cap` bytes (pass one more than the most allowed).
fn read_limited(resp: &mut Response<ureq::Body>, cap: u64, what: &str) -> Result<Vec<u8>> {
    resp.body_mut()
        .with_config()
        .limit(cap)
        .read_to_vec()
        .map_err(|e| match e {
            ureq::Error::BodyExceedsLimit(_) => anyhow::anyhow!(
                "the registry sent more than {} bytes for {what}; nothing was installed",
                cap - 1
            ),
            e => anyhow::anyhow!("reading {what} from the registry failed: {e}"),
        })
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
    fn digests_are_sha256_of_the_bytes() {
        assert_eq!(
            sha256(b""),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}

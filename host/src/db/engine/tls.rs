//! TLS to a PostgreSQL store, through rustls (ring; no system OpenSSL), with
//! libpq's `sslmode` and `sslrootcert` in the store's URL:
//!
//! - `disable`: no TLS.
//! - `prefer` (the default): TLS when the server offers it, else without;
//!   the certificate is not checked (as libpq without a root certificate).
//! - `require`: TLS or no connection; the certificate is not checked, unless
//!   `sslrootcert=` names a CA, which it must then be signed by (as libpq).
//! - `verify-ca`: TLS, with a certificate signed by the CA in `sslrootcert=`.
//! - `verify-full`: that, and the certificate names the host connected to.
//!
//! `sslrootcert=` defaults to `~/.postgresql/root.crt` when it exists, as
//! libpq's does. tokio-postgres knows only the first three modes: the URL it
//! parses carries `require` for the verifying ones, and the checking is ours.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect};

use super::{Error, Result};

/// How a connection uses TLS (libpq's `sslmode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

/// The URL tokio-postgres parses, and the TLS its connections use.
pub struct Split {
    pub url: String,
    pub mode: SslMode,
    pub tls: MakeRustls,
}

/// Take `sslmode` and `sslrootcert` out of `url` and make the TLS they ask for.
pub fn split(url: &str, shown: &str) -> Result<Split> {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let mut mode = SslMode::Prefer;
    let mut root: Option<PathBuf> = None;
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "sslmode" => {
                mode = match value {
                    "disable" => SslMode::Disable,
                    "prefer" => SslMode::Prefer,
                    "require" => SslMode::Require,
                    "verify-ca" => SslMode::VerifyCa,
                    "verify-full" => SslMode::VerifyFull,
                    other => {
                        return Err(Error::Connection(format!(
                            "sslmode={other} in {shown} is not one loopbox knows: use disable, prefer, require, verify-ca or verify-full"
                        )));
                    }
                }
            }
            "sslrootcert" => root = Some(PathBuf::from(percent_decode(value))),
            _ => kept.push(pair),
        }
    }
    if root.is_none() && mode != SslMode::Disable {
        // libpq's default place for it, used only when it is there.
        root = std::env::var_os("HOME")
            .map(|h| Path::new(&h).join(".postgresql/root.crt"))
            .filter(|p| p.is_file());
    }
    let (wire, check) = match (mode, &root) {
        (SslMode::Disable, _) => ("disable", Check::Nothing),
        (SslMode::Prefer, _) => ("prefer", Check::Nothing),
        (SslMode::Require, None) => ("require", Check::Nothing),
        (SslMode::Require | SslMode::VerifyCa, Some(ca)) => ("require", Check::Ca(ca.clone())),
        (SslMode::VerifyFull, Some(ca)) => ("require", Check::Full(ca.clone())),
        (SslMode::VerifyCa | SslMode::VerifyFull, None) => {
            return Err(Error::Connection(format!(
                "sslmode={} in {shown} checks the server's certificate against a CA, and none was given: add sslrootcert=/path/to/ca.pem to the URL (or put the CA at ~/.postgresql/root.crt)",
                if mode == SslMode::VerifyCa {
                    "verify-ca"
                } else {
                    "verify-full"
                }
            )));
        }
    };
    kept.push(match wire {
        "disable" => "sslmode=disable",
        "prefer" => "sslmode=prefer",
        _ => "sslmode=require",
    });
    Ok(Split {
        url: format!("{base}?{}", kept.join("&")),
        mode,
        tls: MakeRustls::new(check)?,
    })
}

/// What is checked of the server's certificate.
enum Check {
    Nothing,
    /// Signed by this CA.
    Ca(PathBuf),
    /// Signed by this CA, and for the host connected to.
    Full(PathBuf),
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
            (b'%', Some(&h), Some(&l)) if hex(h).is_some() && hex(l).is_some() => {
                out.push((hex(h).unwrap_or(0) * 16 + hex(l).unwrap_or(0)) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The CA certificates in the PEM file at `path`.
fn roots(path: &Path) -> Result<RootCertStore> {
    let bad = |why: String| {
        Error::Connection(format!(
            "failed to read sslrootcert `{}`: {why}; give the PEM file of the CA that signed the server's certificate",
            path.display()
        ))
    };
    let pem = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
    let mut store = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| bad(e.to_string()))?;
        store.add(cert).map_err(|e| bad(e.to_string()))?;
    }
    if store.is_empty() {
        return Err(bad("it holds no certificate".into()));
    }
    Ok(store)
}

/// Makes the TLS side of each connection (tokio-postgres's `MakeTlsConnect`).
#[derive(Clone)]
pub struct MakeRustls {
    config: Arc<ClientConfig>,
}

impl MakeRustls {
    fn new(check: Check) -> Result<MakeRustls> {
        let provider = provider();
        let verifier: Arc<dyn ServerCertVerifier> = match check {
            Check::Nothing => Arc::new(Unchecked(provider.clone())),
            Check::Ca(ca) => Arc::new(AnyName(webpki(&ca, provider.clone())?)),
            Check::Full(ca) => webpki(&ca, provider.clone())?,
        };
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::Connection(format!("failed to set up TLS: {e}")))?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        Ok(MakeRustls {
            config: Arc::new(config),
        })
    }
}

fn webpki(ca: &Path, provider: Arc<CryptoProvider>) -> Result<Arc<WebPkiServerVerifier>> {
    WebPkiServerVerifier::builder_with_provider(Arc::new(roots(ca)?), provider)
        .build()
        .map_err(|e| {
            Error::Connection(format!("failed to use sslrootcert `{}`: {e}", ca.display()))
        })
}

/// `require` and `prefer` without a CA: encrypted, the certificate not checked
/// (libpq's), though the handshake's signatures are.
#[derive(Debug)]
struct Unchecked(Arc<CryptoProvider>);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify-ca`: the chain is checked against the CA, the host name is not.
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        // The name is checked after the chain: a wrong name means a good chain.
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

impl<S> MakeTlsConnect<S> for MakeRustls
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = RustlsStream<S>;
    type TlsConnect = RustlsConnect;
    type Error = rustls::pki_types::InvalidDnsNameError;

    fn make_tls_connect(
        &mut self,
        domain: &str,
    ) -> std::result::Result<RustlsConnect, Self::Error> {
        Ok(RustlsConnect {
            config: self.config.clone(),
            name: ServerName::try_from(domain.to_string())?,
        })
    }
}

/// The TLS side of one connection.
pub struct RustlsConnect {
    config: Arc<ClientConfig>,
    name: ServerName<'static>,
}

impl<S> TlsConnect<S> for RustlsConnect
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = RustlsStream<S>;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = std::io::Result<RustlsStream<S>>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        Box::pin(async move {
            tokio_rustls::TlsConnector::from(self.config)
                .connect(self.name, stream)
                .await
                .map(RustlsStream)
        })
    }
}

/// A connection's stream, encrypted.
pub struct RustlsStream<S>(tokio_rustls::client::TlsStream<S>);

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for RustlsStream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for RustlsStream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> tokio_postgres::tls::TlsStream for RustlsStream<S> {
    fn channel_binding(&self) -> ChannelBinding {
        // SCRAM's channel binding is not offered: the server then does not require it.
        ChannelBinding::none()
    }
}

#[cfg(test)]
mod tests {
    use super::super::pg_server::PgServer;
    use super::super::postgres::PgConn;
    use std::process::Command;

    fn openssl(dir: &Path, args: &[&str]) {
        let out = Command::new("openssl")
            .current_dir(dir)
            .args(args)
            .output()
            .expect("failed to run openssl (the test makes its certificates with it)");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A CA `name`.crt/.key.
    fn ca(dir: &Path, name: &str) {
        openssl(
            dir,
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-days",
                "2",
                "-subj",
                &format!("/CN={name}"),
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.crt"),
            ],
        );
    }

    use super::Path;

    #[test]
    fn tls_is_used_as_sslmode_says_and_a_certificate_the_url_does_not_trust_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        ca(d, "ca");
        ca(d, "other-ca");
        // The server's certificate, signed by `ca`, for the name `localhost` only.
        openssl(
            d,
            &[
                "req",
                "-new",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-subj",
                "/CN=localhost",
                "-keyout",
                "server.key",
                "-out",
                "server.csr",
            ],
        );
        std::fs::write(
            d.join("ext"),
            "subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
        )
        .unwrap();
        openssl(
            d,
            &[
                "x509",
                "-req",
                "-in",
                "server.csr",
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                "ext",
                "-out",
                "server.crt",
            ],
        );
        let server = PgServer::start_tls(&d.join("server.crt"), &d.join("server.key"))
            .unwrap_or_else(|e| panic!("{e:#}"));
        let url = |host: &str, query: &str| {
            format!("postgres://loopbox@{host}:{}/postgres?{query}", server.port)
        };
        let encrypted = |url: &str| -> bool {
            let c = PgConn::connect(url).unwrap_or_else(|e| panic!("{url}: {e}"));
            let rows = c
                .query(
                    "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
                    &[],
                )
                .unwrap();
            rows[0].get::<_, bool>(0).unwrap()
        };
        let refused = |url: &str| -> String {
            match PgConn::connect(url) {
                Ok(_) => panic!("{url} connected"),
                Err(e) => e.to_string(),
            }
        };
        let trusted = format!("sslrootcert={}", d.join("ca.crt").display());
        let other = format!("sslrootcert={}", d.join("other-ca.crt").display());

        assert!(encrypted(&url("127.0.0.1", "sslmode=require")));
        assert!(encrypted(&url("127.0.0.1", "sslmode=prefer")));
        assert!(encrypted(&url("127.0.0.1", "")), "prefer is the default");
        assert!(!encrypted(&url("127.0.0.1", "sslmode=disable")));
        assert!(encrypted(&url(
            "localhost",
            &format!("sslmode=verify-full&{trusted}")
        )));
        // verify-ca checks the signature, not the name.
        assert!(encrypted(&url(
            "127.0.0.1",
            &format!("sslmode=verify-ca&{trusted}")
        )));

        let e = refused(&url("127.0.0.1", &format!("sslmode=verify-full&{trusted}")));
        assert!(
            e.contains("not valid for name") && e.contains("verify-full"),
            "{e}"
        );
        for mode in ["verify-full", "verify-ca", "require"] {
            let e = refused(&url("localhost", &format!("sslmode={mode}&{other}")));
            assert!(
                e.contains("UnknownIssuer") && e.contains("sslrootcert"),
                "{mode}: {e}"
            );
        }
        let e = refused(&url("localhost", "sslmode=verify-full"));
        assert!(e.contains("add sslrootcert="), "{e}");
        let e = refused(&url("localhost", "sslmode=allow"));
        assert!(
            e.contains("sslmode=allow") && e.contains("verify-full"),
            "{e}"
        );
        let e = refused(&url(
            "localhost",
            &format!(
                "sslmode=verify-full&sslrootcert={}",
                d.join("server.key").display()
            ),
        ));
        assert!(e.contains("holds no certificate"), "{e}");

        // Several MB each way through TLS over the non-blocking socket: the
        // request waits for room to write (POLLOUT), the answer comes in many
        // records. Checked whole, not only its length.
        let c = PgConn::connect(&url("127.0.0.1", "sslmode=require")).unwrap();
        let big: String = (0..(6 << 20))
            .map(|i| char::from(b'a' + (i % 23) as u8))
            .collect();
        let rows = c
            .query(
                "SELECT $1::text || $1::text, md5($1::text)",
                &[crate::db::engine::Value::Text(big.clone())],
            )
            .unwrap();
        let echoed: String = rows[0].get(0).unwrap();
        assert!(
            echoed.len() == 2 * big.len() && echoed == big.repeat(2),
            "the echo differs"
        );
        assert_eq!(rows[0].get::<_, String>(1).unwrap().len(), 32);
        assert_eq!(
            c.query("SELECT 1", &[]).unwrap().len(),
            1,
            "the connection is still in step"
        );

        // A server without TLS: require refuses it, prefer goes on without.
        let plain = PgServer::shared(false).unwrap().url();
        let e = refused(&format!("{plain}?sslmode=require"));
        assert!(e.contains("TLS"), "{e}");
        assert!(!encrypted(&format!("{plain}?sslmode=prefer")));
    }
}

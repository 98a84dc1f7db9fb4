//! Signatures on components: an Ed25519 signature embedded as the component's
//! last top-level custom section (`loopbox-signature`), over everything before
//! it, in the manner of wasmsign2's embedded signatures. The needs section
//! comes before it, so a signature covers what the policy asks for too.
//!
//! Keys are `ed25519:BASE64` (public) and a secret-key file holding
//! `loopbox-ed25519-secret:BASE64` (the 32-byte seed), written mode 0600.

use std::path::Path;

use anyhow::{Context, Result, bail};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use ring::signature::{ED25519, Ed25519KeyPair, KeyPair, UnparsedPublicKey};
use serde::{Deserialize, Serialize};

use super::sections;

const SECRET_PREFIX: &str = "loopbox-ed25519-secret:";
const PUBLIC_PREFIX: &str = "ed25519:";
/// Signed messages start with this, so a loopbox signature means nothing elsewhere.
const DOMAIN: &[u8] = b"loopbox-signature-v1\n";

/// A signing key, read from its file.
pub struct SecretKey {
    pair: Ed25519KeyPair,
}

/// What the signature section holds.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Envelope {
    key: String,
    signature: String,
}

/// What a component's signature says, when it is sound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signature {
    Unsigned,
    /// Signed, and the signature verifies, by this public key (`ed25519:...`).
    SignedBy(String),
}

impl SecretKey {
    /// A new random key, written to `path` (which must not exist) readable by you alone.
    pub fn generate(path: &Path) -> Result<SecretKey> {
        use ring::rand::SecureRandom;
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut seed = [0u8; 32];
        ring::rand::SystemRandom::new()
            .fill(&mut seed)
            .map_err(|_| anyhow::anyhow!("the system has no randomness to make a key with"))?;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .with_context(|| {
                format!(
                    "cannot create `{}` (is a key already there?)",
                    path.display()
                )
            })?;
        writeln!(file, "{SECRET_PREFIX}{}", B64.encode(seed))
            .with_context(|| format!("cannot write `{}`", path.display()))?;
        Self::from_seed(&seed)
    }

    pub fn read(path: &Path) -> Result<SecretKey> {
        let text = crate::files::read_capped(path, 4096)
            .with_context(|| format!("cannot read the signing key `{}`", path.display()))?;
        let text = String::from_utf8_lossy(&text);
        let seed = text
            .trim()
            .strip_prefix(SECRET_PREFIX)
            .and_then(|b| B64.decode(b).ok())
            .filter(|s| s.len() == 32)
            .with_context(|| {
                format!(
                    "`{}` is not a loopbox signing key (make one with `loopbox key new FILE`)",
                    path.display()
                )
            })?;
        Self::from_seed(&seed)
    }

    fn from_seed(seed: &[u8]) -> Result<SecretKey> {
        let pair = Ed25519KeyPair::from_seed_unchecked(seed)
            .map_err(|e| anyhow::anyhow!("not an Ed25519 key: {e}"))?;
        Ok(SecretKey { pair })
    }

    /// `ed25519:BASE64`, what goes in `[trust.keys]`.
    pub fn public(&self) -> String {
        format!(
            "{PUBLIC_PREFIX}{}",
            B64.encode(self.pair.public_key().as_ref())
        )
    }

    /// `component`, with any earlier signature replaced by this key's.
    pub fn sign(&self, component: &[u8]) -> Result<Vec<u8>> {
        let bare = sections::strip(component, &[sections::SIGNATURE])?;
        let envelope = Envelope {
            key: self.public(),
            signature: B64.encode(self.pair.sign(&message(&bare)).as_ref()),
        };
        let json = serde_json::to_vec(&envelope).expect("serializable");
        Ok(sections::append(bare, sections::SIGNATURE, &json))
    }
}

/// Check a public key's form: `ed25519:` and 32 bytes of base64.
pub fn parse_public(key: &str) -> Result<Vec<u8>> {
    key.strip_prefix(PUBLIC_PREFIX)
        .and_then(|b| B64.decode(b).ok())
        .filter(|k| k.len() == 32)
        .with_context(|| {
            format!("`{key}` is not a public key: it is `ed25519:` and 44 characters of base64")
        })
}

/// Whether `component` is signed and, if so, by whom. A signature that does not
/// verify, is not the last section, or is malformed is an error, never `Unsigned`.
pub fn verify(component: &[u8]) -> Result<Signature> {
    let Some((payload, section)) = sections::find(component, sections::SIGNATURE)? else {
        return Ok(Signature::Unsigned);
    };
    if section.end != component.len() {
        bail!("its signature is not its last section: something was added after it was signed");
    }
    let envelope: Envelope =
        serde_json::from_slice(payload).context("its signature section is malformed")?;
    let key = parse_public(&envelope.key).context("its signature names no valid key")?;
    let sig = B64
        .decode(&envelope.signature)
        .context("its signature is not base64")?;
    UnparsedPublicKey::new(&ED25519, key)
        .verify(&message(&component[..section.start]), &sig)
        .map_err(|_| {
            anyhow::anyhow!(
                "its signature by {} does not verify: the component was changed after it was signed",
                envelope.key
            )
        })?;
    Ok(Signature::SignedBy(envelope.key))
}

fn message(signed: &[u8]) -> Vec<u8> {
    let mut m = DOMAIN.to_vec();
    m.extend_from_slice(blake3::hash(signed).as_bytes());
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(dir: &Path, name: &str) -> SecretKey {
        SecretKey::generate(&dir.join(name)).unwrap()
    }

    #[test]
    fn a_signature_verifies_and_any_change_breaks_it() {
        let dir = tempfile::tempdir().unwrap();
        let alice = key(dir.path(), "alice.key");
        let c = wat::parse_str("(component)").unwrap();
        assert_eq!(verify(&c).unwrap(), Signature::Unsigned);
        let signed = alice.sign(&c).unwrap();
        assert_eq!(
            verify(&signed).unwrap(),
            Signature::SignedBy(alice.public())
        );
        // Re-read from the file: the same key.
        assert_eq!(
            SecretKey::read(&dir.path().join("alice.key"))
                .unwrap()
                .public(),
            alice.public()
        );

        // A section slipped in before the signature, or appended after it.
        let bare = sections::strip(&signed, &[sections::SIGNATURE]).unwrap();
        let sig = sections::find(&signed, sections::SIGNATURE)
            .unwrap()
            .unwrap()
            .0
            .to_vec();
        let slipped =
            sections::append(sections::append(bare, "x", b"y"), sections::SIGNATURE, &sig);
        assert!(
            verify(&slipped)
                .unwrap_err()
                .to_string()
                .contains("does not verify")
        );
        let after = sections::append(signed.clone(), "x", b"y");
        assert!(
            verify(&after)
                .unwrap_err()
                .to_string()
                .contains("last section")
        );

        // Someone else's key over the same bytes is a different signer, not alice.
        let mallory = key(dir.path(), "mallory.key");
        assert_eq!(
            verify(&mallory.sign(&signed).unwrap()).unwrap(),
            Signature::SignedBy(mallory.public())
        );
    }

    #[test]
    fn keys_are_private_and_not_overwritten_and_bad_keys_are_named() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k");
        key(dir.path(), "k");
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert!(SecretKey::generate(&path).is_err());
        std::fs::write(dir.path().join("bad"), "hello").unwrap();
        let e = SecretKey::read(&dir.path().join("bad")).err().unwrap();
        assert!(e.to_string().contains("loopbox key new"), "{e}");
        assert!(parse_public("ed25519:abc").is_err());
    }
}

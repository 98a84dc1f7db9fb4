//! Shipping policies: what a component declares it needs, who signed it, and
//! how it travels through an OCI registry into a workspace.
//!
//! - [`sections`]: the component's top-level custom sections loopbox writes.
//! - [`needs`]: the grants a policy asks for, embedded as `loopbox-needs`.
//! - [`sign`]: Ed25519 signatures embedded as `loopbox-signature`; keys.
//! - [`reference`]: `oci://REGISTRY/REPOSITORY:TAG` references.
//! - [`registry`]: the OCI distribution client (pull and push, bounded and checked).
//! - [`store`]: fetched components, by digest, for offline runs.
//! - [`lock`]: `loopbox.lock`, the pins of registry policies.
//! - [`admit`]: the checks on an installed policy's bytes before they compile.
//! - [`grant`]: an approved policy written into `loopbox.toml`, comments kept.

pub mod admit;
pub mod grant;
pub mod lock;
pub mod needs;
pub mod reference;
pub mod registry;
pub mod sections;
pub mod sign;
pub mod store;

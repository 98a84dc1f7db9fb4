//! Errors that cross layers whole: [`HostError`], a failure of loopbox itself
//! while it served a guest's call, and [`find`], which looks for a typed error
//! (a store's advice, a SQLite code) inside any error, through a `HostError`.
//! It sits below everything, so the store and the Wasm side both use it.

use std::sync::Arc;

/// A failure of loopbox itself (the store, the file system) while serving a
/// guest's call. It keeps the error whole, types and all, so what the store
/// said about it (a [`crate::db::StoreAdvice`]) reaches the user unchanged.
#[derive(Debug, Clone)]
pub struct HostError(Arc<anyhow::Error>);

impl HostError {
    pub fn new(error: anyhow::Error) -> HostError {
        HostError(Arc::new(error))
    }

    pub fn error(&self) -> &anyhow::Error {
        &self.0
    }

    /// The error itself when this is its last holder (as it is once the guest's
    /// call has returned), else this wrapper around it.
    pub fn into_error(self) -> anyhow::Error {
        Arc::try_unwrap(self.0).unwrap_or_else(|shared| anyhow::Error::new(HostError(shared)))
    }
}

impl std::fmt::Display for HostError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#}", self.0)
    }
}

impl std::error::Error for HostError {}

/// Two host failures are the same when they say the same (faults compare by what they report).
impl PartialEq for HostError {
    fn eq(&self, other: &HostError) -> bool {
        self.to_string() == other.to_string()
    }
}

/// A host failure as a wasmtime error: it stops the guest, and the run stops
/// with it without blaming the policy (see [`crate::wasm::fault::PolicyFault::Host`]).
pub fn host_err(e: impl Into<anyhow::Error>) -> wasmtime::Error {
    wasmtime::Error::new(HostError::new(e.into()))
}

/// The `T` in `e`: the error it wraps or a context on it (as anyhow finds
/// them), a source anywhere in its chain, or the same inside a [`HostError`]
/// in that chain.
pub fn find<T>(e: &anyhow::Error) -> Option<&T>
where
    T: std::error::Error + Send + Sync + 'static,
{
    e.downcast_ref::<T>()
        .or_else(|| e.chain().find_map(|c| c.downcast_ref::<T>()))
        .or_else(|| {
            e.chain()
                .find_map(|c| c.downcast_ref::<HostError>())
                .and_then(|h| find::<T>(h.error()))
        })
}

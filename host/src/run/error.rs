//! How putting a run together failed: the library knows no exit codes, so a
//! failure comes back as a [`LaunchError`] whose [`Failed`] kind the front end
//! maps to its code (the CLI's exit code, the API's status, a parked run).

/// What kind of failure stopped a launch: the front end chooses its exit code by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failed {
    /// Something the user can fix: an argument, the config, the policy.
    Usage,
    /// loopbox itself: the store, I/O.
    Internal,
    /// A run's grants or policy changed since it started, and the change was
    /// not accepted: the error says how the front end's user accepts it.
    Changed,
}

/// A failed launch step, with its kind.
#[derive(Debug)]
pub struct LaunchError {
    pub kind: Failed,
    pub error: anyhow::Error,
}

impl LaunchError {
    pub fn usage(error: impl Into<anyhow::Error>) -> LaunchError {
        LaunchError {
            kind: Failed::Usage,
            error: error.into(),
        }
    }

    pub fn internal(error: impl Into<anyhow::Error>) -> LaunchError {
        LaunchError {
            kind: Failed::Internal,
            error: error.into(),
        }
    }

    pub fn changed(error: impl Into<anyhow::Error>) -> LaunchError {
        LaunchError {
            kind: Failed::Changed,
            error: error.into(),
        }
    }
}

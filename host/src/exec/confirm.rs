//! Confirmation of ask-tier actions. The front end decides how a person is
//! asked; with no one to ask (no terminal, `CI` set, a hook), the answer is
//! always no: an ask-tier action is declined, never approved by default.

/// How a person is asked to approve an action.
pub trait Confirm: Send + Sync {
    /// `Ok(true)` approved, `Ok(false)` refused, `Err(why)` when no one could be asked.
    fn confirm(&self, action: &str, rule: &str) -> Result<bool, String>;
}

/// Nobody to ask: every ask-tier action is declined.
pub struct NoOneToAsk(pub &'static str);

impl Confirm for NoOneToAsk {
    fn confirm(&self, _: &str, _: &str) -> Result<bool, String> {
        Err(self.0.to_string())
    }
}

/// Approves everything (`--yes`).
pub struct ApproveAll;

impl Confirm for ApproveAll {
    fn confirm(&self, _: &str, _: &str) -> Result<bool, String> {
        Ok(true)
    }
}

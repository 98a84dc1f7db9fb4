//! Quotas across runs: budgets a server sets per tenant (actions per hour,
//! agent turns per day, dollars and tokens per day) that no single run's
//! limits can see. The run asks its [`Quota`] before each action and each
//! agent turn; a refusal names the quota and its value, and reaches the policy
//! as `budget-exhausted` (a turn the driver would send ends the run instead).
//! Once a turn's result and cost are recorded, the run tells the quota what it
//! cost.

/// What is about to be spent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spend {
    /// An action (a command, a prompt, a worktree).
    Action,
    /// An agent turn: a prompt action, or the turn after an `inject`.
    AgentTurn,
}

/// A budget shared by many runs.
pub trait Quota: Send + Sync {
    /// Count `spend` against the quota; `Err` says which quota is used up (its
    /// key and value) and nothing is counted.
    fn spend(&self, spend: Spend) -> Result<(), String>;

    /// [`Quota::spend`], keeping a quota that could not be checked (its store
    /// failed) apart from a refusal: `Err` is handled as any failed store
    /// write (the step ends where it stood, nothing is spent, and the run can
    /// be resumed or taken over), never let through.
    fn try_spend(&self, spend: Spend) -> anyhow::Result<Result<(), String>> {
        Ok(self.spend(spend))
    }

    /// What an agent turn cost, once it is recorded with its result (for
    /// budgets in dollars and tokens). Nothing to count by default.
    fn charged(&self, _charge: &crate::spend::Charge) {}
}

//! Quotas across runs: budgets a server sets per tenant (actions per hour,
//! agent turns per day) that no single run's limits can see. The run asks its
//! [`Quota`] before each action and each agent turn; a refusal names the quota
//! and its value, and reaches the policy as `budget-exhausted` (a turn the
//! driver would send ends the run instead).

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
}

//! A tenant's shared budgets: `actions_per_hour` and `agent_turns_per_day`,
//! counted over every run of the tenant in a sliding window. The runs ask
//! before each action and agent turn (`limits::quota::Quota`); a refusal names
//! the quota and its value, and the policy sees `budget-exhausted`.
//!
//! The windows live in memory, holding at most one timestamp per unit of the
//! quota (so a window never grows past its own limit), and start from the
//! store's journal when the server starts, so a restart gives no one a fresh
//! hour.

use std::collections::VecDeque;
use std::sync::Mutex;

use crate::db::now_ms;
use crate::limits::quota::{Quota, Spend};

const HOUR_MS: i64 = 3_600_000;
const DAY_MS: i64 = 24 * HOUR_MS;

/// One sliding window: at most `limit` spends within `span_ms`.
#[derive(Debug)]
struct Window {
    key: String,
    limit: u64,
    span_ms: i64,
    at: VecDeque<i64>,
}

impl Window {
    fn new(key: String, limit: u64, span_ms: i64, seen: &[i64]) -> Window {
        let mut w = Window {
            key,
            limit,
            span_ms,
            at: VecDeque::new(),
        };
        for &t in seen {
            w.push(t);
        }
        w
    }

    fn push(&mut self, t: i64) {
        if self.limit == 0 {
            return;
        }
        self.at.push_back(t);
        while self.at.len() as u64 > self.limit {
            self.at.pop_front();
        }
    }

    fn expire(&mut self, now: i64) {
        while self.at.front().is_some_and(|&t| t <= now - self.span_ms) {
            self.at.pop_front();
        }
    }

    /// Whether one more fits now; `Err` names the quota.
    fn check(&mut self, now: i64, unit: &str) -> Result<(), String> {
        self.expire(now);
        if self.limit > 0 && self.at.len() as u64 >= self.limit {
            let free_in = self.at.front().map_or(0, |&t| t + self.span_ms - now);
            return Err(format!(
                "the tenant's quota {} = {} is used up ({} {unit} in the last {}); the next one is possible in {}s; raise it in the server config if the tenant needs more",
                self.key,
                self.limit,
                self.at.len(),
                if self.span_ms == HOUR_MS {
                    "hour"
                } else {
                    "day"
                },
                ((free_in + 999) / 1000).max(1)
            ));
        }
        Ok(())
    }
}

/// A tenant's quotas, shared by all its runs.
#[derive(Debug)]
pub struct TenantQuota {
    windows: Mutex<(Window, Window)>,
}

impl TenantQuota {
    /// The quotas of `tenant`, their windows holding what was spent already:
    /// the times of the actions in the last hour and of the agent turns in the last day.
    pub fn new(
        tenant: &str,
        actions_per_hour: u64,
        agent_turns_per_day: u64,
        actions: &[i64],
        turns: &[i64],
    ) -> TenantQuota {
        TenantQuota {
            windows: Mutex::new((
                Window::new(
                    format!("tenants.{tenant}.actions_per_hour"),
                    actions_per_hour,
                    HOUR_MS,
                    actions,
                ),
                Window::new(
                    format!("tenants.{tenant}.agent_turns_per_day"),
                    agent_turns_per_day,
                    DAY_MS,
                    turns,
                ),
            )),
        }
    }

    /// From how far back the store's journal is read to start the windows.
    pub fn since(now: i64) -> i64 {
        now - DAY_MS
    }

    fn spend_at(&self, spend: Spend, now: i64) -> Result<(), String> {
        let mut w = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        let (actions, turns) = &mut *w;
        match spend {
            Spend::Action => {
                actions.check(now, "actions")?;
                actions.push(now);
            }
            Spend::AgentTurn => {
                turns.check(now, "agent turns")?;
                turns.push(now);
            }
        }
        Ok(())
    }
}

impl Quota for TenantQuota {
    fn spend(&self, spend: Spend) -> Result<(), String> {
        self.spend_at(spend, now_ms())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quota_refuses_past_its_value_names_itself_and_frees_up_with_time() {
        let now = 10 * DAY_MS;
        // Two actions already in the last hour, one an hour and a bit ago.
        let q = TenantQuota::new("alpha", 3, 1, &[now - HOUR_MS - 5, now - 10, now - 5], &[]);
        q.spend_at(Spend::Action, now).unwrap();
        let e = q.spend_at(Spend::Action, now).unwrap_err();
        assert!(
            e.starts_with("the tenant's quota tenants.alpha.actions_per_hour = 3 is used up (3 actions in the last hour)"),
            "{e}"
        );
        // An hour after the oldest of the three, one is free again.
        q.spend_at(Spend::Action, now - 10 + HOUR_MS).unwrap();
        q.spend_at(Spend::AgentTurn, now).unwrap();
        let e = q.spend_at(Spend::AgentTurn, now + HOUR_MS).unwrap_err();
        assert!(e.contains("tenants.alpha.agent_turns_per_day = 1"), "{e}");
        // 0 is no limit, and keeps nothing.
        let free = TenantQuota::new("b", 0, 0, &[], &[]);
        for _ in 0..10_000 {
            free.spend_at(Spend::Action, now).unwrap();
        }
        assert!(free.windows.lock().unwrap().0.at.is_empty());
    }
}

//! A tenant's shared budgets: `actions_per_hour` and `agent_turns_per_day`,
//! counted over every run of the tenant in a sliding window, and
//! `max_cost_usd_per_day` and `max_tokens_per_day`, what the runs' agent turns
//! spent in the last 24 hours. The runs ask before each action and agent turn
//! (`limits::quota::Quota`), and say what each turn cost once it is recorded;
//! a refusal names the quota, its value and (for spend) what was spent, and
//! the policy sees `budget-exhausted` (a driver's turn ends the run), as a
//! run's own `run.max_cost_usd` does.
//!
//! On a store several processes share (PostgreSQL, with `loopbox worker`s),
//! the store counts: each action and turn is counted and recorded in one
//! transaction of `db/quota.rs`, across every process, and the spend budgets
//! read the day's charges from the store's journal at each check, so N
//! workers give a tenant its quota once. A store that fails at a check
//! refuses the spend, saying so.
//!
//! On a server's own SQLite store (one process) the windows live in memory,
//! holding at most one timestamp per unit of the quota (so a window never
//! grows past its own limit), or for spend one bucket per minute (at most
//! 1,440), and start from the store's journal when the server starts, so a
//! restart gives no one a fresh hour or day.

use std::collections::VecDeque;
use std::sync::Mutex;

use anyhow::Context;

use super::store::Store;
use crate::db::now_ms;
use crate::db::quota::Taken;
use crate::limits::quota::{Quota, Spend};
use crate::spend::{Charge, Totals, usd};

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
            let oldest = self.at.front().copied().unwrap_or(now);
            return Err(self.used_up(self.at.len() as u64, oldest, now, unit));
        }
        Ok(())
    }

    /// The refusal: the quota's key and value, what was used, when one frees up.
    fn used_up(&self, used: u64, oldest: i64, now: i64, unit: &str) -> String {
        let free_in = oldest + self.span_ms - now;
        format!(
            "the tenant's quota {} = {} is used up ({used} {unit} in the last {}); the next one is possible in {}s; raise it in the server config if the tenant needs more",
            self.key,
            self.limit,
            if self.span_ms == HOUR_MS {
                "hour"
            } else {
                "day"
            },
            ((free_in + 999) / 1000).max(1)
        )
    }

    /// Count one more in the store's window (`db/quota.rs`), atomically across
    /// every process on the store; `kind` names the rows. `Err` is a store
    /// that failed: nothing was counted, and the caller must not spend.
    fn take_in(&self, store: &Store, tenant: &str, kind: &str, now: i64, unit: &str) -> Checked {
        let taken = store
            .db()
            .quota_take(tenant, kind, self.limit, self.span_ms, now)
            .with_context(|| {
                format!(
                    "the tenant's quota {} = {} could not be checked, so nothing more was spent",
                    self.key, self.limit
                )
            })?;
        Ok(match taken {
            Taken::Yes => Ok(()),
            Taken::Full { used, oldest } => Err(self.used_up(used, oldest, now, unit)),
        })
    }
}

/// A check's answer: `Ok(Err)` a refusal naming the quota, `Err` a quota that
/// could not be checked (its store failed), which lets nothing through.
type Checked = anyhow::Result<Result<(), String>>;

const MINUTE_MS: i64 = 60_000;

/// What agent turns spent in the last 24 hours, by the minute: each bucket
/// the totals of the turns recorded in that minute.
#[derive(Debug, Default)]
struct SpendWindow {
    buckets: VecDeque<(i64, Totals)>,
}

impl SpendWindow {
    fn add(&mut self, at: i64, charge: &Charge) {
        let minute = at.div_euclid(MINUTE_MS);
        match self.buckets.back_mut() {
            Some((m, t)) if *m == minute => t.add(charge),
            _ => {
                let mut t = Totals::default();
                t.add(charge);
                self.buckets.push_back((minute, t));
            }
        }
    }

    /// The last 24 hours' totals (a minute's bucket stands until the whole
    /// minute has left the window: the sum is never less than what was spent).
    fn totals(&mut self, now: i64) -> Totals {
        let first = (now - DAY_MS).div_euclid(MINUTE_MS);
        while self.buckets.front().is_some_and(|(m, _)| *m < first) {
            self.buckets.pop_front();
        }
        let mut sum = Totals::default();
        for (_, t) in &self.buckets {
            sum.turns += t.turns;
            sum.unmetered += t.unmetered;
            sum.unpriced += t.unpriced;
            sum.tokens.add(&t.tokens);
            sum.cost_usd += t.cost_usd;
        }
        sum
    }
}

/// A tenant's daily spend budgets, in the words of the server config.
#[derive(Debug, Clone, Copy, Default)]
pub struct DailyBudget {
    pub max_cost_usd: Option<f64>,
    pub max_tokens: Option<u64>,
}

/// A tenant's quotas, shared by all its runs.
pub struct TenantQuota {
    windows: Mutex<(Window, Window)>,
    tenant: String,
    budget: DailyBudget,
    spent: Mutex<SpendWindow>,
    /// On a store shared by several processes: the store counts the windows
    /// and holds the day's spend, not this process's memory.
    shared: Option<Store>,
    /// Where a spent daily budget queues the tenant's `budget.reached` webhooks.
    events: Option<crate::db::Db>,
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
            tenant: tenant.to_string(),
            budget: DailyBudget::default(),
            spent: Mutex::new(SpendWindow::default()),
            shared: None,
            events: None,
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

    /// With daily spend budgets, started from the charges (their times) the
    /// journal holds for the last 24 hours.
    pub fn with_budget(mut self, budget: DailyBudget, charges: &[(i64, Charge)]) -> TenantQuota {
        self.budget = budget;
        let spent = self.spent.get_mut().unwrap_or_else(|p| p.into_inner());
        for (at, c) in charges {
            spent.add(*at, c);
        }
        self
    }

    /// Count and check in `store` (shared by several processes) instead of in
    /// memory: every `loopbox worker` and server on it then shares one window
    /// per quota, and the daily budgets read the store's journal at each check.
    pub fn on_store(mut self, store: Store) -> TenantQuota {
        self.shared = Some(store);
        self
    }

    /// Queue the tenant's `budget.reached` webhooks in `db` when a daily
    /// budget refuses a turn.
    pub fn notifying(mut self, db: crate::db::Db) -> TenantQuota {
        self.events = Some(db);
        self
    }

    /// A daily budget refused a turn (`why`): tell the tenant's webhooks, once
    /// per budget and day (UTC) however many turns and processes it refuses.
    fn budget_reached(&self, now: i64, why: &str) {
        let Some(db) = &self.events else { return };
        let which = if why.contains("max_cost_usd_per_day") {
            "max_cost_usd_per_day"
        } else {
            "max_tokens_per_day"
        };
        let budget = format!("tenants.{}.{which}", self.tenant);
        let key = format!("budget.reached/{}/{which}/{}", self.tenant, now / DAY_MS);
        let data = serde_json::json!({"budget": budget, "message": why});
        if let Err(e) = db.emit_event(&self.tenant, "budget.reached", Some(&key), &data) {
            crate::errln!(
                "loopbox serve: queueing tenant `{}`'s budget.reached webhooks failed: {e:#}",
                self.tenant
            );
        }
    }

    /// What the tenant's runs spent in the 24 hours before `now`, as this
    /// process counted it (see [`TenantQuota::day_spent`] for a shared store).
    pub fn spent_today(&self, now: i64) -> Totals {
        self.spent
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .totals(now)
    }

    /// Whether another agent turn fits the daily spend budgets; `Err` names
    /// the key, its value and what was spent, as a run's own budget does.
    fn check_budget(&self, now: i64) -> Checked {
        let (cost, tokens) = (self.budget.max_cost_usd, self.budget.max_tokens);
        if cost.is_none() && tokens.is_none() {
            return Ok(Ok(()));
        }
        let key = |k: &str| format!("tenants.{}.{k}", self.tenant);
        let spent = self.day_spent(now).with_context(|| {
            format!(
                "the tenant's daily budgets ({}) could not be checked, so no agent turn was sent",
                [
                    cost.map(|v| format!("{} = {v}", key("max_cost_usd_per_day"))),
                    tokens.map(|v| format!("{} = {v}", key("max_tokens_per_day"))),
                ]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(", ")
            )
        })?;
        let judged = self.judge_budget(&spent);
        if let Err(why) = &judged {
            self.budget_reached(now, why);
        }
        Ok(judged)
    }

    /// Whether `spent` (the last 24 hours') leaves room for another turn.
    fn judge_budget(&self, spent: &Totals) -> Result<(), String> {
        let (cost, tokens) = (self.budget.max_cost_usd, self.budget.max_tokens);
        let key = |k: &str| format!("tenants.{}.{k}", self.tenant);
        if let Some(limit) = cost {
            if spent.cost_usd >= limit {
                return Err(format!(
                    "the tenant's budget {} = {limit} is used: its runs spent {} over {} agent turn(s) in the last 24 hours",
                    key("max_cost_usd_per_day"),
                    usd(spent.cost_usd),
                    spent.turns
                ));
            }
            if !spent.cost_known() {
                return Err(format!(
                    "the tenant's budget {} = {limit} cannot be kept: the cost of {} agent turn(s) in the last 24 hours is unknown (no usage reported, or no [prices] entry for the model); price them in the tenant's loopbox.toml",
                    key("max_cost_usd_per_day"),
                    spent.unpriced + spent.unmetered
                ));
            }
        }
        if let Some(limit) = tokens {
            let used = spent.tokens.total();
            if used >= limit {
                return Err(format!(
                    "the tenant's budget {} = {limit} is used: its runs used {used} tokens over {} agent turn(s) in the last 24 hours",
                    key("max_tokens_per_day"),
                    spent.turns
                ));
            }
            if spent.unmetered > 0 {
                return Err(format!(
                    "the tenant's budget {} = {limit} cannot be kept: {} agent turn(s) in the last 24 hours reported no usage",
                    key("max_tokens_per_day"),
                    spent.unmetered
                ));
            }
        }
        Ok(())
    }

    /// What the tenant's runs spent in the 24 hours before `now`: on a shared
    /// store, the charges journaled by every process; else this process's count.
    fn day_spent(&self, now: i64) -> anyhow::Result<Totals> {
        let Some(store) = &self.shared else {
            return Ok(self.spent_today(now));
        };
        let mut day = Totals::default();
        for (_, c) in store.charges_since(&self.tenant, now - DAY_MS)? {
            day.add(&c);
        }
        Ok(day)
    }

    /// From how far back the store's journal is read to start the windows.
    pub fn since(now: i64) -> i64 {
        now - DAY_MS
    }

    /// [`TenantQuota::try_spend_at`] with a failure to check as its refusal text.
    #[cfg(test)]
    fn spend_at(&self, spend: Spend, now: i64) -> Result<(), String> {
        self.try_spend_at(spend, now)
            .unwrap_or_else(|e| Err(format!("{e:#}")))
    }

    fn try_spend_at(&self, spend: Spend, now: i64) -> Checked {
        if let Some(store) = &self.shared {
            return self.spend_in(store, spend, now);
        }
        Ok(self.spend_in_memory(spend, now))
    }

    fn spend_in_memory(&self, spend: Spend, now: i64) -> Result<(), String> {
        let mut w = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        let (actions, turns) = &mut *w;
        match spend {
            Spend::Action => {
                actions.check(now, "actions")?;
                actions.push(now);
            }
            Spend::AgentTurn => {
                turns.check(now, "agent turns")?;
                let spent = self.spent_today(now);
                if let Err(why) = self.judge_budget(&spent) {
                    self.budget_reached(now, &why);
                    return Err(why);
                }
                turns.push(now);
            }
        }
        Ok(())
    }
}

impl TenantQuota {
    /// [`TenantQuota::spend_at`] on a shared store. A turn's budgets are read
    /// before it is counted, so a turn the budget refuses uses no turn.
    fn spend_in(&self, store: &Store, spend: Spend, now: i64) -> Checked {
        let (kind, unit) = match spend {
            Spend::Action => ("action", "actions"),
            Spend::AgentTurn => {
                if let Err(why) = self.check_budget(now)? {
                    return Ok(Err(why));
                }
                ("turn", "agent turns")
            }
        };
        // The window's key, value and span only: the count is the store's.
        let window = {
            let w = self.windows.lock().unwrap_or_else(|p| p.into_inner());
            let w = if spend == Spend::Action { &w.0 } else { &w.1 };
            Window::new(w.key.clone(), w.limit, w.span_ms, &[])
        };
        window.take_in(store, &self.tenant, kind, now, unit)
    }
}

impl Quota for TenantQuota {
    fn spend(&self, spend: Spend) -> Result<(), String> {
        // Refused too when it could not be checked: never let through unchecked.
        self.try_spend(spend)
            .unwrap_or_else(|e| Err(format!("{e:#}")))
    }

    fn try_spend(&self, spend: Spend) -> anyhow::Result<Result<(), String>> {
        self.try_spend_at(spend, now_ms())
    }

    fn charged(&self, charge: &Charge) {
        if self.shared.is_some() {
            // The store journaled it; the next check reads it there.
            return;
        }
        self.spent
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .add(now_ms(), charge);
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

    fn charge(cost: f64, tokens: u64) -> Charge {
        Charge {
            unmetered: false,
            model: Some("m".into()),
            tokens: crate::spend::Tokens {
                input: tokens,
                ..Default::default()
            },
            cost_usd: Some(cost),
            source: crate::spend::CostSource::Agent,
        }
    }

    #[test]
    fn a_daily_spend_budget_counts_the_last_24_hours_and_names_itself() {
        let now = 10 * DAY_MS;
        // $0.30 yesterday (out of the window), $0.20 an hour ago.
        let q = TenantQuota::new("alpha", 0, 0, &[], &[]).with_budget(
            DailyBudget {
                max_cost_usd: Some(0.5),
                max_tokens: Some(10_000),
            },
            &[
                (now - DAY_MS - 2 * MINUTE_MS, charge(0.3, 100)),
                (now - HOUR_MS, charge(0.2, 100)),
            ],
        );
        q.spend_at(Spend::AgentTurn, now).unwrap();
        q.spent.lock().unwrap().add(now, &charge(0.3, 100));
        let e = q.spend_at(Spend::AgentTurn, now).unwrap_err();
        assert_eq!(
            e,
            "the tenant's budget tenants.alpha.max_cost_usd_per_day = 0.5 is used: its runs spent $0.5000 over 2 agent turn(s) in the last 24 hours"
        );
        // A day later it has all left the window.
        q.spend_at(Spend::AgentTurn, now + DAY_MS + MINUTE_MS)
            .unwrap();
        // Tokens likewise; a turn of unknown cost stops a cost budget.
        q.spent
            .lock()
            .unwrap()
            .add(now + DAY_MS + MINUTE_MS, &charge(0.0, 20_000));
        assert!(
            q.spend_at(Spend::AgentTurn, now + DAY_MS + MINUTE_MS)
                .unwrap_err()
                .contains(
                    "tenants.alpha.max_tokens_per_day = 10000 is used: its runs used 20000 tokens"
                )
        );
        let u = TenantQuota::new("b", 0, 0, &[], &[]).with_budget(
            DailyBudget {
                max_cost_usd: Some(1.0),
                max_tokens: None,
            },
            &[(now, Charge::unmetered())],
        );
        assert!(
            u.spend_at(Spend::AgentTurn, now)
                .unwrap_err()
                .contains("cannot be kept")
        );
        // The window is a bucket a minute, however many turns.
        let many = TenantQuota::new("c", 0, 0, &[], &[]);
        for i in 0..100_000 {
            many.spent.lock().unwrap().add(now + i, &charge(0.0, 1));
        }
        assert_eq!(many.spent.lock().unwrap().buckets.len(), 2);
    }
}

/// On the real PostgreSQL: the count is the store's, shared by every handle
/// (as by every worker), and a store that fails refuses the spend, saying so.
#[cfg(test)]
mod on_a_shared_store {
    use super::*;

    fn quota(store: &Store) -> TenantQuota {
        TenantQuota::new("alpha", 2, 5, &[], &[])
            .with_budget(
                DailyBudget {
                    max_cost_usd: Some(1.0),
                    max_tokens: None,
                },
                &[],
            )
            .on_store(store.clone())
    }

    #[test]
    fn two_processes_share_one_window_and_a_failing_store_refuses() {
        let (_dir, db) = crate::db::testing::postgres();
        let a = Store::with(db.clone()).unwrap();
        let b = Store::with(db.reopen().unwrap()).unwrap();
        let (qa, qb) = (quota(&a), quota(&b));
        let now = now_ms();
        qa.spend_at(Spend::Action, now).unwrap();
        qb.spend_at(Spend::Action, now).unwrap();
        let e = qa.spend_at(Spend::Action, now).unwrap_err();
        assert!(
            e.starts_with("the tenant's quota tenants.alpha.actions_per_hour = 2 is used up (2 actions in the last hour); the next one is possible in 3600s"),
            "{e}"
        );
        // Turns are their own window, and the day's spend (none) is read from the store.
        qb.spend_at(Spend::AgentTurn, now).unwrap();
        // The store fails: the spend is refused, naming the quota and why.
        db.second_connection()
            .unwrap()
            .execute_batch("ALTER TABLE quota_spends RENAME TO quota_spends_gone")
            .unwrap();
        let e = format!(
            "{:#}",
            qa.try_spend_at(Spend::Action, now + HOUR_MS).unwrap_err()
        );
        assert!(
            e.starts_with("the tenant's quota tenants.alpha.actions_per_hour = 2 could not be checked, so nothing more was spent: failed to count a tenant's quota")
                && e.contains("quota_spends"),
            "{e}"
        );
        // Through the trait's plain `spend`, the same text refuses.
        assert!(
            qa.spend(Spend::Action)
                .unwrap_err()
                .contains("could not be checked")
        );
        db.second_connection()
            .unwrap()
            .execute_batch("ALTER TABLE journal RENAME TO journal_gone")
            .unwrap();
        let e = format!("{:#}", qb.try_spend_at(Spend::AgentTurn, now).unwrap_err());
        assert!(
            e.starts_with("the tenant's daily budgets (tenants.alpha.max_cost_usd_per_day = 1) could not be checked, so no agent turn was sent: "),
            "{e}"
        );
    }
}

//! Confirmation of ask-tier actions, and the approvals that stand in for a
//! person who is not there.
//!
//! The front end decides how a person is asked ([`Confirm`]): a terminal asks
//! at once; with nobody at a terminal, [`Approvals`] records a pending approval
//! in the run's store and the run waits for it (`[confirm] unattended = "wait"`,
//! the default), or the action is declined at once (`"decline"`). A hook cannot
//! wait, so it declines naming the pending approval, and a later event making
//! the same request finds the decision. An approval is bound to the digest of
//! the exact request ([`AskRequest::digest`]): what runs, the program it
//! resolved to, the rule, the policy's digest and signer and the run's grants.
//! A decision already recorded for the call always comes first, so a run
//! resumed after an approval never asks again.

use std::sync::Arc;

use anyhow::Result;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::db::Db;
use crate::db::approvals::{Approval, ApprovalStatus, NewApproval, Settle};

/// One ask-tier action, as a person is asked about it.
#[derive(Debug, Clone)]
pub struct AskRequest {
    /// The action in a few words (`exec \`rm -rf build\``), as the run log says it.
    pub what: String,
    /// The rule that asks for a yes.
    pub rule: String,
    /// The exact request: its kind, what runs (argv, script, message), the
    /// program it resolved to, its directory and variables.
    pub request: Value,
    /// The call's place in the run's journal (event, call), once the event's row exists.
    pub position: Option<(i64, i64)>,
}

/// A person's answer, or why there is none yet.
#[derive(Debug, Clone)]
pub enum Answer {
    Approved,
    /// A person said no, or nobody said yes in time: the reason is the policy's to read.
    Declined(String),
    /// Nobody can be asked here, and waiting is off or impossible.
    NoOneToAsk(String),
    /// A pending approval was recorded: the run waits for it.
    Wait(Box<Approval>),
}

/// How a person is asked to approve an action.
pub trait Confirm: Send + Sync {
    /// The answer; `Err` when loopbox itself failed (the store), which stops the
    /// event without blaming the policy.
    fn confirm(&self, ask: &AskRequest) -> Result<Answer>;

    /// Whether a person already approved this exact request in this run, the
    /// approval since used (a network destination is approved for the rest of
    /// the run, in whichever process resumes it).
    fn approved_before(&self, _ask: &AskRequest) -> Result<bool> {
        Ok(false)
    }
}

/// Nobody to ask: every ask-tier action is declined.
pub struct NoOneToAsk(pub &'static str);

impl Confirm for NoOneToAsk {
    fn confirm(&self, _: &AskRequest) -> Result<Answer> {
        Ok(Answer::NoOneToAsk(self.0.to_string()))
    }
}

/// Approves everything (`--yes`).
pub struct ApproveAll;

impl Confirm for ApproveAll {
    fn confirm(&self, _: &AskRequest) -> Result<Answer> {
        Ok(Answer::Approved)
    }
}

/// `[confirm]`: what an ask-tier action does when nobody can be asked at a terminal.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ConfirmConfig {
    #[serde(default)]
    pub unattended: Unattended,
}

impl ConfirmConfig {
    pub fn is_default(&self) -> bool {
        *self == ConfirmConfig::default()
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Unattended {
    /// Record a pending approval and wait for someone to decide it.
    #[default]
    Wait,
    /// Decline the action at once.
    Decline,
}

/// `[approvals]`: the rules pending approvals are asked under.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalsConfig {
    /// Whether the person who started a run may approve its actions.
    #[serde(default = "yes", rename = "self")]
    pub allow_self: bool,
    /// How long an approval waits before it turns into a decline (`"24h"`, `"30m"`, `"90s"`).
    #[serde(
        default = "default_timeout",
        with = "duration_text",
        rename = "timeout"
    )]
    pub timeout_ms: u64,
}

fn yes() -> bool {
    true
}

fn default_timeout() -> u64 {
    24 * 3600 * 1000
}

impl Default for ApprovalsConfig {
    fn default() -> Self {
        ApprovalsConfig {
            allow_self: true,
            timeout_ms: default_timeout(),
        }
    }
}

impl ApprovalsConfig {
    pub fn is_default(&self) -> bool {
        *self == ApprovalsConfig::default()
    }
}

/// `"24h"`, `"30m"`, `"45s"`, `"1d"` as milliseconds, and back.
mod duration_text {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn parse(text: &str) -> Result<u64, String> {
        let t = text.trim();
        let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
        let (n, unit) = t.split_at(split);
        let n: u64 = n
            .parse()
            .map_err(|_| format!("`{text}` is not a duration: write a number and a unit, like \"24h\", \"30m\" or \"90s\""))?;
        let scale = match unit {
            "s" => 1000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => {
                return Err(format!(
                    "`{text}` has no known unit: use s, m, h or d (\"24h\")"
                ));
            }
        };
        let ms = n
            .checked_mul(scale)
            .filter(|&ms| ms > 0 && ms <= 365 * 86_400_000);
        ms.ok_or_else(|| format!("`{text}` must be more than 0 and at most 365d"))
    }

    pub fn show(ms: u64) -> String {
        for (unit, scale) in [("d", 86_400_000), ("h", 3_600_000), ("m", 60_000)] {
            if ms.is_multiple_of(scale) {
                return format!("{}{unit}", ms / scale);
            }
        }
        format!("{}s", ms / 1000)
    }

    pub fn serialize<S: Serializer>(ms: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&show(*ms))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        let text = String::deserialize(d)?;
        parse(&text).map_err(serde::de::Error::custom)
    }
}

pub use duration_text::show as show_duration;

impl AskRequest {
    /// The digest an approval is bound to: the request, its rule, and what the
    /// run is (`run` from [`RunIdentity`]), in one canonical JSON text.
    pub fn digest(&self, run: &RunIdentity) -> String {
        blake3::hash(self.bound(run).to_string().as_bytes())
            .to_hex()
            .to_string()
    }

    /// Everything the digest covers, as it is shown to the person deciding.
    pub fn bound(&self, run: &RunIdentity) -> Value {
        json!({
            "request": self.request,
            "rule": self.rule,
            "policy": run.policy,
            "policy_digest": run.policy_digest,
            "signer": run.signer,
            "grants": run.grants_digest,
        })
    }
}

/// What a run is, for the approvals it asks: its policy, the policy's digest and
/// signer, and the digest of its pinned grants.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RunIdentity {
    pub run: String,
    pub policy: String,
    pub policy_digest: String,
    pub signer: Option<String>,
    pub grants_digest: Option<String>,
}

impl RunIdentity {
    /// The identity of the stored run `run`.
    pub fn of(db: &Db, run: &str) -> Result<RunIdentity> {
        let r = db.existing_run(run)?;
        Ok(RunIdentity {
            run: r.id,
            policy: r.policy,
            policy_digest: r.policy_digest,
            signer: r.options.signer.clone(),
            grants_digest: r
                .options
                .grants
                .as_ref()
                .map(|g| blake3::hash(g.to_string().as_bytes()).to_hex().to_string()),
        })
    }
}

/// Who asks about a run's ask-tier actions.
#[derive(Clone)]
pub enum Asking {
    /// A person right here (a terminal, or `--yes`).
    Here(Arc<dyn Confirm>),
    /// Nobody: the run waits for an approval (or declines, `[confirm] unattended`).
    Nobody,
    /// A hook session: its events cannot wait, so an approval is asked and the
    /// action declined; a later event with the same request finds the decision.
    Hook,
}

/// Who decides ask-tier actions of one run: first a decision already recorded
/// for the call, then a person right here (a terminal), then nobody: wait for
/// an approval, or decline.
pub struct Approvals {
    db: Db,
    run_id: String,
    confirm: ConfirmConfig,
    approvals: ApprovalsConfig,
    /// A person who can be asked at once, if there is one.
    here: Option<Arc<dyn Confirm>>,
    hook: bool,
    /// What the run is, read from its row at the first question (a hook's row
    /// is written after its context is made).
    run: std::sync::OnceLock<RunIdentity>,
}

impl Approvals {
    pub fn new(
        db: Db,
        run_id: &str,
        confirm: ConfirmConfig,
        approvals: ApprovalsConfig,
        asking: Asking,
    ) -> Approvals {
        let (here, hook) = match asking {
            Asking::Here(c) => (Some(c), false),
            Asking::Nobody => (None, false),
            Asking::Hook => (None, true),
        };
        Approvals {
            db,
            run_id: run_id.to_string(),
            confirm,
            approvals,
            here,
            hook,
            run: std::sync::OnceLock::new(),
        }
    }

    fn identity(&self) -> Result<&RunIdentity> {
        if let Some(r) = self.run.get() {
            return Ok(r);
        }
        let found = RunIdentity::of(&self.db, &self.run_id)?;
        Ok(self.run.get_or_init(|| found))
    }

    fn recorded(&self, ask: &AskRequest, digest: &str) -> Result<Option<Approval>> {
        match (self.hook, ask.position) {
            (false, Some((event, call))) => self.db.approval_at(&self.run_id, event, call),
            _ => self.db.approval_for_digest(&self.run_id, digest),
        }
    }

    /// The answer a recorded approval gives, settling it; None when it no longer applies.
    fn answer_of(&self, a: &Approval, digest: &str) -> Result<Option<Answer>> {
        if a.digest != digest {
            // The request changed since it was asked: the old decision covers nothing.
            self.db.settle_approval(
                &a.id,
                &Settle::Void("the request changed before it ran".into()),
            )?;
            return Ok(None);
        }
        let by = |a: &Approval| {
            let who = a.decided_by.as_deref().unwrap_or("someone");
            match a.reason.as_deref().filter(|r| !r.is_empty()) {
                Some(r) => format!("{who}: {r}"),
                None => who.to_string(),
            }
        };
        Ok(Some(match a.status {
            ApprovalStatus::Pending if a.overdue(crate::db::now_ms()) => {
                self.db.settle_approval(&a.id, &Settle::Expired)?;
                self.db.settle_approval(&a.id, &Settle::Consumed)?;
                Answer::Declined(format!(
                    "nobody approved {} within approvals.timeout = {} (approval {}), so it was declined",
                    a.what,
                    show_duration(self.approvals.timeout_ms),
                    a.id
                ))
            }
            ApprovalStatus::Pending if self.hook => Answer::Declined(pending_note(a)),
            ApprovalStatus::Pending => Answer::Wait(Box::new(a.clone())),
            ApprovalStatus::Approved => {
                self.db.settle_approval(&a.id, &Settle::Consumed)?;
                Answer::Approved
            }
            ApprovalStatus::Denied => {
                self.db.settle_approval(&a.id, &Settle::Consumed)?;
                Answer::Declined(format!("denied by {} (approval {})", by(a), a.id))
            }
            ApprovalStatus::Expired => {
                self.db.settle_approval(&a.id, &Settle::Consumed)?;
                Answer::Declined(format!(
                    "nobody approved it before its deadline (approval {} expired)",
                    a.id
                ))
            }
            ApprovalStatus::Void => return Ok(None),
        }))
    }
}

/// What a declined hook action says of its pending approval.
fn pending_note(a: &Approval) -> String {
    format!(
        "it waits for a person's approval {}: approve it with `loopbox runs approve {} --approval {}` (or from the server's dashboard), then try again",
        a.id, a.run_id, a.id
    )
}

impl Confirm for Approvals {
    fn approved_before(&self, ask: &AskRequest) -> Result<bool> {
        let digest = ask.digest(self.identity()?);
        self.db.was_approved(&self.run_id, &digest)
    }

    fn confirm(&self, ask: &AskRequest) -> Result<Answer> {
        let run = self.identity()?;
        let digest = ask.digest(run);
        if let Some(a) = self.recorded(ask, &digest)?
            && let Some(answer) = self.answer_of(&a, &digest)?
        {
            return Ok(answer);
        }
        if let Some(here) = &self.here {
            return here.confirm(ask);
        }
        if self.confirm.unattended == Unattended::Decline {
            return Ok(Answer::NoOneToAsk(
                "nobody is at a terminal to say yes ([confirm] unattended = \"decline\")".into(),
            ));
        }
        let a = self.db.request_approval(&NewApproval {
            run: &self.run_id,
            position: if self.hook { None } else { ask.position },
            digest: &digest,
            request: &ask.bound(run),
            what: &ask.what,
            rule: &ask.rule,
            timeout_ms: self.approvals.timeout_ms,
            allow_self: self.approvals.allow_self,
        })?;
        Ok(if self.hook {
            Answer::Declined(pending_note(&a))
        } else {
            Answer::Wait(Box::new(a))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::approvals::{Decide, Verdict};

    fn setup() -> (tempfile::TempDir, Db, Approvals) {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open_workspace(dir.path()).unwrap();
        db.create_driven_run("r1", "builtin:probe", "blake3:p", "{}", &Default::default())
            .unwrap();
        let approvals = Approvals::new(
            db.clone(),
            "r1",
            ConfirmConfig::default(),
            ApprovalsConfig::default(),
            Asking::Nobody,
        );
        (dir, db, approvals)
    }

    fn ask(argv: &[&str]) -> AskRequest {
        AskRequest {
            what: format!("exec `{}`", argv.join(" ")),
            rule: "shell.ask rm".into(),
            request: json!({"kind": "exec", "argv": argv, "program": "/usr/bin/rm"}),
            position: Some((1, 2)),
        }
    }

    fn approve(db: &Db, id: &str, verdict: Verdict) {
        db.decide_approval(&Decide {
            id,
            verdict,
            actor: "local:bob",
            tenant: None,
            reason: Some("ok"),
            digest: None,
        })
        .unwrap()
        .unwrap();
    }

    /// A network destination approved once stays approved for the run, in
    /// whichever process drives it next (a resume, another worker), and
    /// only that exact request.
    #[test]
    fn an_approved_request_is_known_to_a_later_process_of_the_run() {
        let (dir, db, approvals) = setup();
        let net = |port: u16| AskRequest {
            what: format!("commands connecting to example.test:{port}"),
            rule: "network.ask[0] (example.test)".into(),
            request: json!({"kind": "network", "side": "commands", "host": "example.test", "port": port}),
            position: None,
        };
        assert!(!approvals.approved_before(&net(443)).unwrap());
        let Answer::Wait(a) = approvals.confirm(&net(443)).unwrap() else {
            panic!("expected a wait")
        };
        assert!(!approvals.approved_before(&net(443)).unwrap());
        approve(&db, &a.id, Verdict::Approve);
        assert!(matches!(
            approvals.confirm(&net(443)).unwrap(),
            Answer::Approved
        ));
        // Used, and still known, to this process and to the next one's.
        let later = Approvals::new(
            Db::open_workspace(dir.path()).unwrap(),
            "r1",
            ConfirmConfig::default(),
            ApprovalsConfig::default(),
            Asking::Nobody,
        );
        assert!(approvals.approved_before(&net(443)).unwrap());
        assert!(later.approved_before(&net(443)).unwrap());
        assert!(!later.approved_before(&net(8443)).unwrap());
        // A denial is no approval.
        let Answer::Wait(b) = later.confirm(&net(8443)).unwrap() else {
            panic!("expected a wait")
        };
        approve(&db, &b.id, Verdict::Deny);
        assert!(!later.approved_before(&net(8443)).unwrap());
    }

    #[test]
    fn nobody_here_waits_then_the_decision_is_used_once() {
        let (_d, db, approvals) = setup();
        let Answer::Wait(a) = approvals.confirm(&ask(&["rm", "-rf", "build"])).unwrap() else {
            panic!("expected a wait")
        };
        assert_eq!(a.position, Some((1, 2)));
        // Asked again before anyone decided (a resume too early): still waiting, no second approval.
        let Answer::Wait(same) = approvals.confirm(&ask(&["rm", "-rf", "build"])).unwrap() else {
            panic!()
        };
        assert_eq!(same.id, a.id);
        approve(&db, &a.id, Verdict::Approve);
        assert!(matches!(
            approvals.confirm(&ask(&["rm", "-rf", "build"])).unwrap(),
            Answer::Approved
        ));
        assert!(
            db.approval(&a.id)
                .unwrap()
                .unwrap()
                .consumed_at_ms
                .is_some()
        );
    }

    #[test]
    fn a_changed_request_voids_the_old_approval_and_asks_anew() {
        let (_d, db, approvals) = setup();
        let Answer::Wait(a) = approvals.confirm(&ask(&["rm", "-rf", "build"])).unwrap() else {
            panic!()
        };
        approve(&db, &a.id, Verdict::Approve);
        // The replay now asks for something else at the same place.
        let Answer::Wait(b) = approvals.confirm(&ask(&["rm", "-rf", "/"])).unwrap() else {
            panic!("a changed request must not be approved by the old decision")
        };
        assert_ne!(a.id, b.id);
        assert_eq!(
            db.approval(&a.id).unwrap().unwrap().status,
            ApprovalStatus::Void
        );
    }

    #[test]
    fn a_denial_and_an_expiry_are_declines_with_the_reason() {
        let (_d, db, mut approvals) = setup();
        let Answer::Wait(a) = approvals.confirm(&ask(&["rm", "x"])).unwrap() else {
            panic!()
        };
        approve(&db, &a.id, Verdict::Deny);
        let Answer::Declined(why) = approvals.confirm(&ask(&["rm", "x"])).unwrap() else {
            panic!()
        };
        assert!(why.contains("denied by local:bob: ok"), "{why}");

        approvals.approvals.timeout_ms = 1;
        let mut late = ask(&["rm", "y"]);
        late.position = Some((3, 1));
        let Answer::Wait(b) = approvals.confirm(&late).unwrap() else {
            panic!()
        };
        std::thread::sleep(std::time::Duration::from_millis(5));
        let Answer::Declined(why) = approvals.confirm(&late).unwrap() else {
            panic!()
        };
        assert!(why.contains("within approvals.timeout = 0s"), "{why}");
        assert_eq!(
            db.approval(&b.id).unwrap().unwrap().status,
            ApprovalStatus::Expired
        );
    }

    #[test]
    fn a_hook_declines_naming_the_approval_and_a_later_event_finds_the_decision() {
        let (_d, db, mut approvals) = setup();
        approvals.hook = true;
        let Answer::Declined(why) = approvals.confirm(&ask(&["rm", "x"])).unwrap() else {
            panic!()
        };
        let pending = db.approvals(&Default::default()).unwrap();
        assert_eq!(pending.len(), 1);
        assert!(why.contains(&pending[0].id), "{why}");
        approve(&db, &pending[0].id, Verdict::Approve);
        // The next event's same request (at another place) is approved, once.
        let mut later = ask(&["rm", "x"]);
        later.position = Some((7, 1));
        assert!(matches!(
            approvals.confirm(&later).unwrap(),
            Answer::Approved
        ));
        assert!(matches!(
            approvals.confirm(&later).unwrap(),
            Answer::Declined(_)
        ));
    }

    #[test]
    fn decline_mode_and_a_person_here_never_record_an_approval() {
        let (_d, db, mut approvals) = setup();
        approvals.confirm.unattended = Unattended::Decline;
        assert!(matches!(
            approvals.confirm(&ask(&["rm", "x"])).unwrap(),
            Answer::NoOneToAsk(_)
        ));
        approvals.here = Some(Arc::new(ApproveAll));
        assert!(matches!(
            approvals.confirm(&ask(&["rm", "x"])).unwrap(),
            Answer::Approved
        ));
        assert!(db.approvals(&Default::default()).unwrap().is_empty());
    }

    #[test]
    fn durations_read_and_print() {
        assert_eq!(duration_text::parse("24h"), Ok(86_400_000));
        assert_eq!(duration_text::parse("90s"), Ok(90_000));
        assert!(duration_text::parse("0m").is_err());
        assert!(duration_text::parse("5y").unwrap_err().contains("unit"));
        assert!(duration_text::parse("400d").is_err());
        assert_eq!(show_duration(86_400_000), "1d");
        assert_eq!(show_duration(5_400_000), "90m");
    }
}

//! A parked run's machine as data: what a top-level loop keeps between its
//! steps, written to the run's state when its `backoff` parks it and read
//! back when the timer's tick arrives (the host makes a fresh instance for
//! every event, so nothing else survives). The loop itself is not kept: the
//! guest loads it again from the start payload it keeps beside this.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{Machine, Run};
use crate::spec::Loop;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Saved {
    context: Map<String, Value>,
    captured: Map<String, Value>,
    prev: Option<Value>,
    state: String,
    step: u32,
    started: u64,
    stalls: Vec<(String, Option<(String, u32)>)>,
    workspace: Option<String>,
    path: Vec<String>,
    summary_ran: bool,
    retries: Vec<(String, u32)>,
    throttle: Vec<(String, u32)>,
    recent: Vec<(String, i32, String)>,
    seen: Vec<((String, i32, String), u32)>,
    fingerprints: Vec<(String, String)>,
    edges: Vec<((String, String), u32)>,
    came_from: Option<String>,
    holds: Vec<(String, u32)>,
    maintained: u32,
    prepatch_memo: Vec<((String, String), Value)>,
    #[serde(default)]
    messages: Vec<String>,
    #[serde(default)]
    pending: Option<super::approval::Pending>,
}

fn pairs<K: Clone, V: Clone>(m: &BTreeMap<K, V>) -> Vec<(K, V)> {
    m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

impl<'a> Machine<'a> {
    /// What a parked top-level machine keeps.
    pub(super) fn save(&self) -> Saved {
        Saved {
            context: self.r.context.clone(),
            captured: self.r.captured.clone(),
            prev: self.r.prev.clone(),
            state: self.r.state.clone(),
            step: self.r.step,
            started: self.r.started,
            stalls: pairs(&self.r.stalls),
            workspace: self.r.workspace.clone(),
            path: self.path.clone(),
            summary_ran: self.summary_ran,
            retries: pairs(&self.retries),
            throttle: pairs(&self.throttle),
            recent: self.recent.iter().cloned().collect(),
            seen: pairs(&self.seen),
            fingerprints: pairs(&self.fingerprints),
            edges: pairs(&self.edges),
            came_from: self.came_from.clone(),
            holds: pairs(&self.holds),
            maintained: self.maintained,
            prepatch_memo: pairs(&self.prepatch_memo),
            messages: self.r.messages.clone(),
            pending: self.pending.clone(),
        }
    }

    /// The machine `saved` kept, running `lp` again.
    pub(super) fn restore(lp: &'a Loop, saved: Saved) -> Machine<'a> {
        Machine {
            r: Run {
                lp,
                context: saved.context,
                captured: saved.captured,
                prev: saved.prev,
                param: Map::new(),
                state: saved.state,
                step: saved.step,
                started: saved.started,
                now: saved.started,
                stalls: saved.stalls.into_iter().collect(),
                workspace: saved.workspace,
                messages: saved.messages,
            },
            path: saved.path,
            summary_ran: saved.summary_ran,
            retries: saved.retries.into_iter().collect(),
            throttle: saved.throttle.into_iter().collect(),
            recent: VecDeque::from(saved.recent),
            seen: saved.seen.into_iter().collect(),
            fingerprints: saved.fingerprints.into_iter().collect(),
            edges: saved.edges.into_iter().collect(),
            came_from: saved.came_from,
            depth: 0,
            markers: true,
            holds: saved.holds.into_iter().collect(),
            maintained: saved.maintained,
            backoff_warned: false,
            prepatch_memo: saved.prepatch_memo.into_iter().collect(),
            pending: saved.pending,
            parks: true,
        }
    }
}

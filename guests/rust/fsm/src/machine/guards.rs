//! What stops a state from running forever: the per-state throttle,
//! `retryable_exit_codes`, and the stall detector (`circuit`).

use crate::interp::{self};
use crate::spec::State;

use super::world::{Level, World};
use super::{End, Finish, Machine, failed};

impl<'a> Machine<'a> {
    /// Count a run of the state's action: the `hard_max`-th in a row goes to
    /// `on_throttle_hard` (or `on_error`); past it the loop stops.
    pub(super) fn throttled(
        &mut self,
        state: &State,
        world: &mut dyn World,
    ) -> Result<Option<String>, Finish> {
        let count = self.throttle.entry(state.name.clone()).or_default();
        *count += 1;
        let (count, max) = (*count, state.throttle_hard_max);
        if state.throttle_exempt {
            return Ok(None);
        }
        if count == max {
            let target = state
                .on_throttle_hard
                .as_ref()
                .or(state.routes.error.as_ref());
            if let Some(next) = crate::route::to(state, target) {
                self.log_step(
                    state,
                    &format!("throttled ({count} runs in a row)"),
                    &next,
                    world,
                );
                return Ok(Some(next));
            }
        }
        if count > max {
            return Err(failed(
                End::Error,
                format!(
                    "state `{}` ran {count} times in a row, past its throttle hard_max of {max}",
                    state.name
                ),
            ));
        }
        Ok(None)
    }

    /// `retryable_exit_codes`: an exit code not in the list skips retrying,
    /// to `on_retry_exhausted` or else `on_error`.
    pub(super) fn not_retryable(&self, state: &State, code: i32) -> Option<String> {
        let codes = state.retryable_exit_codes.as_ref()?;
        if codes.contains(&code) {
            return None;
        }
        let target = state
            .on_retry_exhausted
            .as_ref()
            .or(state.routes.error.as_ref());
        crate::route::to(state, target)
    }

    /// The stall detector (`circuit.repeated_failure`): the same
    /// (state, exit code, verdict) `window` times in a row, or
    /// `recurrent_window` times in all, goes to `on_repeated_failure`, or
    /// ends the loop. A change in a progress file resets the window.
    pub(super) fn stalled(
        &mut self,
        state: &State,
        code: i32,
        verdict: &str,
        world: &mut dyn World,
    ) -> Result<Option<String>, Finish> {
        let Some(c) = &self.r.lp.circuit else {
            return Ok(None);
        };
        if let Some(fp) = self.fingerprint(c, world) {
            let changed = self
                .fingerprints
                .get(&state.name)
                .is_some_and(|old| *old != fp);
            if changed {
                self.recent.clear();
                self.fingerprints.clear();
            }
            self.fingerprints.insert(state.name.clone(), fp);
        }
        let triple = (state.name.clone(), code, verdict.to_string());
        self.recent.push_back(triple.clone());
        while self.recent.len() > c.window as usize {
            self.recent.pop_front();
        }
        let consecutive =
            self.recent.len() == c.window as usize && self.recent.iter().all(|t| *t == triple);
        let total = self.seen.entry(triple).or_default();
        *total += 1;
        let recurrent = c.recurrent_window.is_some_and(|w| *total >= w);
        if !(consecutive || recurrent) {
            return Ok(None);
        }
        let why = format!(
            "state `{}` gave exit {code} and `{verdict}` {} times{}",
            state.name,
            if consecutive { c.window } else { *total },
            if consecutive { " in a row" } else { "" }
        );
        match &c.on_repeated {
            Some(t) => {
                world.log(
                    Level::Warn,
                    &format!("stall: {why}; going to `{}`", t.state),
                );
                Ok(Some(t.state.clone()))
            }
            None => Err(failed(End::StallDetected, format!("stall detected: {why}"))),
        }
    }

    /// What the progress files hold now, or `None` when there are none.
    pub(super) fn fingerprint(
        &self,
        c: &crate::spec::Circuit,
        world: &mut dyn World,
    ) -> Option<String> {
        let excluded: Vec<String> = c
            .exclude_paths
            .iter()
            .filter_map(|t| interp::render(t, &self.r).ok())
            .collect();
        let mut parts = Vec::new();
        for t in &c.progress_paths {
            let Ok(path) = interp::render(t, &self.r) else {
                continue;
            };
            if excluded.contains(&path) {
                continue;
            }
            let text = world.read(&path).unwrap_or_default();
            parts.push(crate::start::sha256_hex(text.as_bytes()));
        }
        (!parts.is_empty()).then(|| parts.join(" "))
    }
}

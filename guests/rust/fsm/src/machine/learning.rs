//! A learning state (`type: learning` with `learning:`), as little-loops'
//! `FSMExecutor._execute_learning_state` runs it: for each target, read its
//! record in `.ll/learning-tests/`; a missing or stale one sends
//! `/ll:explore-api TARGET` to the agent (up to `max_retries` times) and is
//! read again; a refuted one, or one still unproven, routes `on_blocked`
//! (else `on_no`); all proven routes `on_yes`. The records and the
//! `learning_tests` settings are read through the workspace capability, the
//! remedy is an ordinary prompt under the user's `[agent]` grant. Its events
//! (`learning_target_stale`, `learning_explore_invoked`, ...) are run-log lines.

use crate::interp;
use crate::learning::{self, Record, Settings};
use crate::spec::{Action, Learning, State};

use super::actions::{Acted, request};
use super::world::{Level, World};
use super::{End, Finish, Machine, budget_spent, failed};

impl Machine<'_> {
    pub(super) fn learning(
        &mut self,
        state: &State,
        l: &Learning,
        world: &mut dyn World,
    ) -> Result<Option<String>, Finish> {
        let fail = |e: String| failed(End::Error, format!("state `{}`: {e}", state.name));
        let targets: Vec<String> = match &l.targets_csv {
            Some(csv) => interp::render(csv, &self.r)
                .map_err(|e| fail(format!("learning.targets_csv: {e}")))?
                .split(',')
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(str::to_string)
                .collect(),
            None => l.targets.clone(),
        };
        let max_retries: i64 = match &l.max_retries_expr {
            Some(expr) => {
                let text = interp::render(expr, &self.r)
                    .map_err(|e| fail(format!("learning.max_retries_expr: {e}")))?;
                text.trim().parse().map_err(|_| {
                    fail(format!(
                        "learning.max_retries_expr gave `{text}`, which is not a whole number"
                    ))
                })?
            }
            None => i64::from(l.max_retries),
        };
        let settings = self.learning_settings(state, world);
        let today = i64::try_from(world.now_ms() / 86_400_000).unwrap_or(i64::MAX);
        let event = |world: &mut dyn World, name: &str, what: String| {
            world.log(Level::Info, &format!("{name}: `{}`: {what}", state.name));
        };
        for target in &targets {
            let mut record = self.learning_record(state, target, &settings, today, world)?;
            let mut attempts: i64 = 0;
            while record.as_ref().is_none_or(|r| r.is("stale")) {
                if attempts >= max_retries {
                    event(
                        world,
                        "learning_blocked",
                        format!(
                            "`{target}` is still unproven after {attempts} explorations (retries_exhausted)"
                        ),
                    );
                    return Ok(self.learning_blocked(state, world));
                }
                let cause = if record.is_none() { "missing" } else { "stale" };
                event(
                    world,
                    "learning_target_stale",
                    format!("`{target}` ({cause})"),
                );
                event(
                    world,
                    "learning_explore_invoked",
                    format!("`{target}`, attempt {}", attempts + 1),
                );
                // The remedy is a slash command whatever the state says
                // (little-loops pins `action_type: slash_command` for it), and
                // its text is interpolated like any action's.
                let remedy = Action::SlashCommand(format!("/ll:explore-api {target}"));
                let acted = match request(&self.r, state, &remedy) {
                    Err(e) => return Err(fail(e)),
                    Ok(req) => match world.act(req) {
                        Ok(out) => Acted::Ran(out),
                        Err(e) => {
                            return Err(budget_spent(&e, &state.name).unwrap_or_else(|| {
                                fail(format!("`/ll:explore-api {target}` could not run: {e}"))
                            }));
                        }
                    },
                };
                // Its output counts as an action's: markers, and `capture`.
                self.observe(state, &acted, world)?;
                attempts += 1;
                record = self.learning_record(state, target, &settings, today, world)?;
            }
            if record.as_ref().is_some_and(|r| r.is("refuted")) {
                event(world, "learning_target_refuted", format!("`{target}`"));
                event(world, "learning_blocked", format!("`{target}` is refuted"));
                return Ok(self.learning_blocked(state, world));
            }
            event(world, "learning_target_proven", format!("`{target}`"));
        }
        event(
            world,
            "learning_complete",
            format!("{} target(s) proven", targets.len()),
        );
        let next = crate::route::to(state, state.routes.by_verdict.get("yes"));
        if let Some(n) = &next {
            self.log_step(state, "learning: every target proven", n, world);
        }
        Ok(next)
    }

    /// `on_blocked`, else `on_no`.
    fn learning_blocked(&self, state: &State, world: &mut dyn World) -> Option<String> {
        let by = &state.routes.by_verdict;
        let next = crate::route::to(state, by.get("blocked").or(by.get("no")));
        if let Some(n) = &next {
            self.log_step(state, "learning: blocked", n, world);
        }
        next
    }

    /// The `learning_tests` settings, read once per visit as little-loops
    /// does; when they cannot be read, staleness is off (little-loops
    /// swallows the error), and the run log says why.
    fn learning_settings(&self, state: &State, world: &mut dyn World) -> Settings {
        let mut read = |path: &str| match world.read(path) {
            Ok(text) => Ok(Some(text)),
            Err(e) if learning::is_missing(&e) => Ok(None),
            Err(e) => Err(e),
        };
        let mut config = Ok(None);
        for path in learning::CONFIG_FILES {
            config = read(path);
            if !matches!(config, Ok(None)) {
                break;
            }
        }
        // `Path.read_text` errors on the override are treated as no override.
        let local = read(learning::LOCAL_OVERRIDE).ok().flatten();
        let settings = config.and_then(|c| learning::settings(c.as_deref(), local.as_deref()));
        settings.unwrap_or_else(|e| {
            world.log(
                Level::Warn,
                &format!(
                    "`{}`: the learning_tests settings cannot be read ({e}); records are not checked for staleness, as little-loops does then",
                    state.name
                ),
            );
            Settings::default()
        })
    }

    /// `_fresh_record`: the target's record, or `None` when it is missing
    /// (or proven but stale, when staleness is on).
    fn learning_record(
        &self,
        state: &State,
        target: &str,
        settings: &Settings,
        today: i64,
        world: &mut dyn World,
    ) -> Result<Option<Record>, Finish> {
        let path = learning::record_path(target);
        let fail = |e: String| {
            failed(
                End::Error,
                format!("state `{}`: learning record `{path}`: {e}", state.name),
            )
        };
        let text = match world.read(&path) {
            Ok(text) => text,
            Err(e) if learning::is_missing(&e) => return Ok(None),
            Err(e) => return Err(fail(e)),
        };
        let Some(record) = learning::parse_record(&text).map_err(fail)? else {
            return Ok(None);
        };
        if settings.enabled && record.is("proven") {
            let threshold = settings.threshold_days().map_err(fail)?;
            if learning::is_stale(&record, threshold, today) {
                return Ok(None);
            }
        }
        Ok(Some(record))
    }
}

//! `loop:` states: another loop run here, as a child with its own context,
//! whose ending picks the parent's route.

use serde_json::{Value, json};

use crate::interp::{self};
use crate::spec::{Loop, Param, State, SubLoop};

use super::actions::render_json_map;
use super::world::{Level, World};
use super::{End, Finish, Machine, failed, run_at};

impl<'a> Machine<'a> {
    /// A `loop:` state: the named loop runs here, in the same sandbox, as a
    /// child with its own context; its ending picks the route (`on_yes` for
    /// a success terminal, `on_no` for a failure one, `on_error` for an
    /// error, `on_timeout` when it ran out of time or steps).
    pub(super) fn sub_loop(
        &mut self,
        state: &State,
        sub: &SubLoop,
        world: &mut dyn World,
    ) -> Result<Option<String>, Finish> {
        let to = |v: &str| crate::route::to(state, state.routes.by_verdict.get(v));
        let on_error = || crate::route::on_error(state);
        let child = match self.load_child(sub, world) {
            Ok(child) => child,
            Err(e) => {
                world.log(Level::Warn, &format!("`{}`: {e}", state.name));
                return match on_error() {
                    Some(next) => Ok(Some(next)),
                    None => Err(failed(End::Error, format!("state `{}`: {e}", state.name))),
                };
            }
        };
        let mut context = child.context.clone();
        if let Some(with) = &sub.with {
            let bound = render_json_map(with, &self.r)
                .map_err(|e| failed(End::Error, format!("state `{}`: with: {e}", state.name)))?;
            context.extend(bound);
            if let Err(p) = Param::bind(&child.parameters, &mut context) {
                let e = format!(
                    "sub-loop `{}` requires parameter `{}` but it is not bound in `with`",
                    sub.name, p.name
                );
                return match on_error() {
                    Some(next) => Ok(Some(next)),
                    None => Err(failed(End::Error, format!("state `{}`: {e}", state.name))),
                };
            }
        } else if sub.passthrough {
            let mut merged = self.r.context.clone();
            for (k, v) in &self.r.captured {
                let v = match v {
                    Value::Object(m) if m.contains_key("exit_code") => {
                        m.get("output").cloned().unwrap_or(Value::Null)
                    }
                    other => other.clone(),
                };
                merged.insert(k.clone(), v);
            }
            merged.extend(context);
            context = merged;
        }
        // What the runner gave this loop reaches the child as little-loops'
        // `_execute_sub_loop` passes it: `run_dir` only along a `with:` (a
        // passthrough carries the whole context), the confidence thresholds
        // always (it seeds them from the same config). A bare `loop:` child has
        // no `run_dir` and no design tokens: `${context.run_dir}` in it stops it.
        let inherited: &[&str] = if sub.with.is_some() {
            &["run_dir", "readiness_threshold", "outcome_threshold"]
        } else {
            &["readiness_threshold", "outcome_threshold"]
        };
        for &key in inherited {
            if let (false, Some(v)) = (context.contains_key(key), self.r.context.get(key)) {
                context.insert(key.into(), v.clone());
            }
        }
        // A child's `input_hash` is its own input's (BUG-2832), as at the start.
        if let (false, Some(Value::String(input))) =
            (context.contains_key("input_hash"), context.get("input"))
        {
            let hash = crate::start::sha256_hex(input.as_bytes());
            context.insert("input_hash".into(), Value::String(hash[..12].to_string()));
        }
        context.entry("max_steps").or_insert(json!(child.max_steps));
        // The child has what is left of this loop's time, and this state's limit.
        let mut child = child;
        let left = self.r.lp.timeout_s.map(|t| {
            let used = world.now_ms().saturating_sub(self.r.started) / 1000;
            t.saturating_sub(used).max(1)
        });
        let cap = match (state.timeout_s, left) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if let Some(cap) = cap
            && child.timeout_s.is_none_or(|t| t > cap)
        {
            child.timeout_s = Some(cap);
        }
        // `worktree:` (little-loops' `_run_sub_loop`, ENH-2609): the child runs in
        // a scratch worktree of the branch, removed when it ends however it ends;
        // empty after interpolation is no worktree.
        let branch = match &sub.worktree {
            Some(t) => interp::render(t, &self.r)
                .map_err(|e| failed(End::Error, format!("state `{}`: worktree: {e}", state.name)))?
                .trim()
                .to_string(),
            None => String::new(),
        };
        let mut worktree = None;
        if !branch.is_empty() {
            match world.worktree_add(&branch) {
                Ok(path) => {
                    world.log(
                        Level::Info,
                        &format!(
                            "`{}`: sub_loop_worktree_attached: branch `{branch}`, path `{path}`",
                            state.name
                        ),
                    );
                    worktree = Some(path);
                }
                Err(e) => {
                    world.log(
                        Level::Warn,
                        &format!(
                            "`{}`: sub_loop_worktree_error: branch `{branch}`: {e}",
                            state.name
                        ),
                    );
                    if let Value::Object(m) = self
                        .r
                        .captured
                        .entry(state.name.clone())
                        .or_insert_with(|| json!({}))
                    {
                        m.insert("error".into(), json!(e));
                    }
                    // little-loops: on_error, else on_no, else no route.
                    return Ok(on_error().or_else(|| to("no")));
                }
            }
        }
        world.log(
            Level::Info,
            &format!("`{}`: sub-loop `{}` starts", state.name, child.name),
        );
        let before = worktree.clone().map(|w| world.set_cwd(Some(w)));
        let mut ending = run_at(
            &child,
            &context,
            self.r.workspace.clone(),
            world,
            self.depth + 1,
            sub.markers,
        );
        if let (Some(path), Some(before)) = (&worktree, before) {
            world.set_cwd(before);
            match world.worktree_remove(path) {
                Ok(()) => world.log(
                    Level::Info,
                    &format!(
                        "`{}`: sub_loop_worktree_detached: branch `{branch}`, path `{path}`",
                        state.name
                    ),
                ),
                Err(e) => world.log(
                    Level::Warn,
                    &format!(
                        "`{}`: the worktree `{path}` was not removed: {e}",
                        state.name
                    ),
                ),
            }
        }
        world.log(
            Level::Info,
            &format!(
                "`{}`: sub-loop `{}` ended: {}",
                state.name, child.name, ending.summary
            ),
        );
        if ending.end == End::Budget {
            // A loopbox budget is not the child's ending to route on.
            return Err(failed(End::Budget, ending.summary));
        }
        let verdict = match ending.end {
            End::Terminal if ending.success => "yes",
            End::Terminal => "no",
            End::Error | End::NoRoute => "error",
            _ => "no",
        };
        if let Some(c) = &state.capture {
            self.r.captured.insert(
                c.clone(),
                json!({"output": ending.summary, "exit_code": null, "verdict": verdict}),
            );
        }
        if (sub.with.is_some() || sub.passthrough) && !ending.captured.is_empty() {
            let captured = std::mem::take(&mut ending.captured);
            self.r
                .captured
                .insert(state.name.clone(), Value::Object(captured));
        }
        if let Value::Object(m) = self
            .r
            .captured
            .entry(state.name.clone())
            .or_insert_with(|| json!({}))
        {
            m.insert("terminated_by".into(), json!(ending.end.name()));
            if ending.end.crashed() {
                m.insert("error".into(), json!(ending.summary));
            }
        }
        let next = match ending.end {
            End::Terminal if ending.success => to("yes"),
            End::Terminal => to("no"),
            End::Error | End::NoRoute => on_error().or_else(|| to("no")),
            End::Timeout | End::MaxSteps => to("timeout").or_else(|| to("no")),
            End::Stopped
            | End::SystemSignal
            | End::CycleDetected
            | End::StallDetected
            | End::Budget => to("no"),
        };
        if let Some(n) = &next {
            self.log_step(
                state,
                &format!("sub-loop {} ({})", ending.end.name(), verdict),
                n,
                world,
            );
        }
        Ok(next)
    }

    /// Find, read and check the loop a sub-loop state names.
    fn load_child(&self, sub: &SubLoop, world: &mut dyn World) -> Result<Loop, String> {
        if self.depth + 1 > crate::load::MAX_SUB_LOOP_DEPTH {
            return Err(format!(
                "sub-loops nest deeper than {}",
                crate::load::MAX_SUB_LOOP_DEPTH
            ));
        }
        let name = interp::render(&sub.name, &self.r).map_err(|e| format!("loop: {e}"))?;
        let mut files = WorldFiles(world);
        let candidates = crate::resolve::loop_candidates(&self.r.lp.file, name.trim());
        let (path, text) = crate::resolve::read_first(&mut files, &candidates)
            .map_err(|e| format!("sub-loop `{name}` cannot be read ({e})"))?;
        let mut child = crate::load::load_child(&path, &text, &mut files).map_err(|problems| {
            format!(
                "sub-loop `{name}` ({path}) has problems:\n{}",
                crate::render(&problems)
            )
        })?;
        // A child that names no release follows its parent's.
        child.little_loops = child.little_loops.or(self.r.lp.little_loops);
        // `${env.NAME}`: the values the run started with.
        child.env = self.r.lp.env.clone();
        Ok(child)
    }
}

/// The world's workspace reads, as the loader wants them.
struct WorldFiles<'w>(&'w mut dyn World);

impl crate::Files for WorldFiles<'_> {
    fn read(&mut self, path: &str) -> Result<String, String> {
        self.0.read(path)
    }
}

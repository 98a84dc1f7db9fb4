//! The runs pages: the tenant's runs (filtered, paged through the
//! `runs_by_tenant` index, live), starting one (an installed policy, or a
//! YAML loop file of a workspace), and one run (its status and outcome, a
//! loop's path of states, the buttons its caller's role may use, its
//! approvals, the live log, the journal of actions, the timeline of events
//! and decisions, its state and grants). One run's page reads the API's own
//! view of the run, bounded whatever the run holds.

use std::sync::Arc;

use axum::extract::{FromRequest, Path, Query, Request, State};
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};
use serde::Deserialize;
use serde_json::Value;

use super::act;
use super::approvals::approval_card;
use super::page::{Ctx, Viewer, age, age_of, error, page, pretty, status, text_of, untrusted};
use crate::db::RunStatus;
use crate::serve::Server;
use crate::serve::api::extract::{Acting, Authed};
use crate::serve::api::runs as api;
use crate::serve::auth::Role;
use crate::serve::store::{RunFilter, RunRow};

/// Runs on a page.
pub const PAGE: usize = 50;
/// How often a live page reloads its live parts.
const REFRESH_MS: u32 = 2000;

/// `/`: the runs.
pub async fn home() -> Response {
    act::see("/runs")
}

#[derive(Debug, Default, Deserialize)]
pub struct ListQuery {
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    policy: Option<String>,
    #[serde(default)]
    before: Option<String>,
    #[serde(default)]
    note: Option<String>,
}

/// The runs page's link with `q`'s filters and another `before`.
fn list_href(q: &ListQuery, before: Option<&str>) -> String {
    let mut parts: Vec<(&str, &str)> = vec![];
    if let Some(s) = q.status.as_deref().filter(|s| !s.is_empty()) {
        parts.push(("status", s));
    }
    if let Some(p) = q.policy.as_deref().filter(|s| !s.is_empty()) {
        parts.push(("policy", p));
    }
    if let Some(b) = before {
        parts.push(("before", b));
    }
    if parts.is_empty() {
        return "/runs".into();
    }
    format!(
        "/runs?{}",
        serde_urlencoded::to_string(parts).unwrap_or_default()
    )
}

pub async fn list(
    State(server): State<Arc<Server>>,
    Viewer(caller): Viewer,
    Query(q): Query<ListQuery>,
) -> Response {
    let ctx = Ctx::of(&server, &caller);
    let status_filter = match q.status.as_deref().filter(|s| !s.is_empty()) {
        Some(s) => match s.parse::<RunStatus>() {
            Ok(s) => Some(s),
            Err(e) => return error(&ctx, axum::http::StatusCode::BAD_REQUEST, &e),
        },
        None => None,
    };
    let filter = RunFilter {
        status: status_filter,
        policy: q.policy.clone().filter(|p| !p.is_empty()),
        before: q.before.clone().filter(|b| !b.is_empty()),
        limit: PAGE,
    };
    let rows = match server.store.runs(&caller.tenant, &filter) {
        Ok(r) => r,
        Err(e) if crate::db::is_store_error(&e) => {
            return error(
                &ctx,
                axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                &format!("{e:#}"),
            );
        }
        Err(e) => {
            return error(&ctx, axum::http::StatusCode::BAD_REQUEST, &format!("{e:#}"));
        }
    };
    let now = crate::db::now_ms();
    let filtered = filter.status.is_some() || filter.policy.is_some();
    let older = (rows.len() == PAGE)
        .then(|| rows.last().map(|r| r.id.clone()))
        .flatten();
    let body = html! {
        div.head {
            h1 { "Runs" }
            @if ctx.may(Role::Operator) {
                a.button.primary href="/runs/new" { "Start a run" }
            }
        }
        @if let Some(n) = act::notice(q.note.as_deref()) { p.note role="status" { (n) } }
        (tenant_spend(&server, &caller.tenant, now))
        form.filters method="get" action="/runs" {
            label { "Status "
                select name="status" {
                    option value="" { "any" }
                    @for s in RunStatus::ALL {
                        option value=(s.as_str()) selected[filter.status == Some(s)] { (s.as_str()) }
                    }
                }
            }
            label { "Policy "
                input type="text" name="policy" value=(q.policy.as_deref().unwrap_or("")) placeholder="name";
            }
            button type="submit" { "Filter" }
            @if filtered { a href="/runs" { "Clear" } }
        }
        div #runs data-live {
            @if rows.is_empty() {
                div.empty {
                    @if filtered {
                        p { "No runs match these filters." } p { a href="/runs" { "Show every run" } }
                    } @else if filter.before.is_some() {
                        p { "No older runs." } p { a href="/runs" { "Back to the newest" } }
                    } @else {
                        p { "No runs yet in tenant " strong { (caller.tenant) } "." }
                        @if ctx.may(Role::Operator) {
                            p { a href="/runs/new" { "Start the first one" } }
                        } @else {
                            p.muted { "An operator of the tenant starts runs; they appear here as they go." }
                        }
                    }
                }
            } @else {
                table.runs {
                    thead { tr {
                        th { "Status" } th { "Run" } th { "Policy" } th { "Tenant" }
                        th { "Started" } th.num { "Actions" } th.num { "Cost" } th { "Updated" }
                    } }
                    tbody {
                        @for r in &rows { (run_row(r, &caller.tenant, now)) }
                    }
                }
            }
        }
        nav.pager {
            @if filter.before.is_some() { a href=(list_href(&q, None)) { "← Newest" } }
            @if let Some(o) = &older { a href=(list_href(&q, Some(o))) { "Older →" } }
        }
    };
    // Only the first page follows new runs as they come.
    let refresh = filter.before.is_none().then_some(REFRESH_MS);
    page(&ctx, "Runs", "/runs", refresh, body).into_response()
}

/// What the tenant's agents spent in the last 24 hours, against its daily
/// budgets when it has any (the figures its quota checks each turn against).
fn tenant_spend(server: &Server, tenant: &str, now: i64) -> Markup {
    let day = server.spent_today(tenant, now).unwrap_or_default();
    let budgets = server.tenants.get(tenant);
    let max_cost = budgets.and_then(|t| t.max_cost_usd_per_day);
    let max_tokens = budgets.and_then(|t| t.max_tokens_per_day);
    if day.turns == 0 && max_cost.is_none() && max_tokens.is_none() {
        return html! {};
    }
    html! {
        p.spend.muted #spend {
            "Last 24 hours: " strong { (day.cost_text()) }
            @if let Some(c) = max_cost { " of " (crate::spend::usd(c)) }
            " · " (day.tokens.total()) " tokens"
            @if let Some(t) = max_tokens { " of " (t) }
            " · " (day.turns) " agent turns"
        }
    }
}

/// A run's spend from the API's `spend` object: `$0.1234 · 1200 tokens · 3 turns`.
fn spend_line(s: &Value) -> String {
    let turns = s["turns"].as_u64().unwrap_or(0);
    if turns == 0 {
        return "no agent turns".into();
    }
    let cost = s["cost_usd"].as_f64().unwrap_or(0.0);
    let known = s["cost_known"].as_bool().unwrap_or(false);
    format!(
        "{}{} · {} tokens · {} agent turns",
        crate::spend::usd(cost),
        if known { "" } else { "+ (some turns unpriced)" },
        s["tokens"]["total"].as_u64().unwrap_or(0),
        turns
    )
}

fn run_row(r: &RunRow, tenant: &str, now: i64) -> Markup {
    let name = r
        .loop_name
        .as_deref()
        .or(r.policy_name.as_deref())
        .unwrap_or(&r.policy);
    html! {
        tr {
            td data-label="Status" { (status(r.status.as_str())) }
            td data-label="Run" {
                a.mono href={ "/runs/" (r.id) } { (r.id) }
                @if let Some(s) = &r.summary { div.summary { (untrusted(s)) } }
            }
            td data-label="Policy" {
                (untrusted(name))
                @if r.loop_name.is_some() { " " span.kind { "loop" } }
            }
            td data-label="Tenant" { (tenant) }
            td data-label="Started" {
                (age(r.created_at_ms, now))
                @if let Some(b) = &r.started_by { div.muted { "by " (untrusted(b)) } }
            }
            td.num data-label="Actions" { (r.actions) }
            td.num data-label="Cost" { (r.spent.cost_text()) }
            td data-label="Updated" { (age(r.updated_at_ms, now)) }
        }
    }
}

/// A workspace's loop files, or why it cannot be looked into.
type LoopFiles = Result<Vec<String>, String>;

#[derive(Debug, Default, Deserialize)]
pub struct NewQuery {
    #[serde(default)]
    policy: Option<String>,
    /// The workspace whose loop files the loop form lists (default: the first root).
    #[serde(default)]
    workspace: Option<String>,
}

/// The form that starts a run (operators and above).
pub async fn new(
    State(server): State<Arc<Server>>,
    Viewer(caller): Viewer,
    Query(q): Query<NewQuery>,
) -> Response {
    let ctx = Ctx::of(&server, &caller);
    if let Err(why) = caller.may(Role::Operator, "start a run") {
        return error(&ctx, axum::http::StatusCode::FORBIDDEN, &why);
    }
    let roots: Vec<String> = server
        .tenants
        .get(&caller.tenant)
        .map(|t| t.roots.iter().map(|r| r.display().to_string()).collect())
        .unwrap_or_default();
    let asked = q
        .workspace
        .clone()
        .filter(|w| !w.is_empty())
        .or_else(|| roots.first().cloned())
        .unwrap_or_default();
    let installed = {
        let server = server.clone();
        let tenant = caller.tenant.clone();
        let asked = asked.clone();
        tokio::task::spawn_blocking(move || -> anyhow::Result<(Vec<String>, LoopFiles)> {
            let path = server.config_file(&tenant)?;
            let config = crate::config::Config::load(&path)?;
            // Only a workspace the API would start a run in is looked into.
            let loops = server
                .tenants
                .named(&tenant)
                .map_err(|e| format!("{e:#}"))
                .and_then(|t| t.workspace(&asked).map_err(|e| format!("{e:#}")))
                .map(|ws| crate::loops::list(&ws, &config));
            Ok((config.policies.keys().cloned().collect(), loops))
        })
        .await
    };
    let (names, loops) = match installed {
        Ok(Ok(n)) => n,
        Ok(Err(e)) => {
            return error(
                &ctx,
                axum::http::StatusCode::BAD_REQUEST,
                &format!("the tenant's loopbox.toml cannot be read: {e:#}"),
            );
        }
        Err(e) => {
            return error(
                &ctx,
                axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                &e.to_string(),
            );
        }
    };
    let body = html! {
        h1 { "Start a run" }
        @if names.is_empty() {
            div.empty {
                p { "Tenant " strong { (caller.tenant) } " has no policy installed." }
                p.muted { "An admin adds one as " code { "[policies.NAME]" } " to the tenant's loopbox.toml." }
            }
        } @else {
            form.card.stack method="post" action="/runs" {
                (ctx.csrf())
                label for="policy" { "Policy" }
                select #policy name="policy" required {
                    @for n in &names {
                        option value=(n) selected[q.policy.as_deref() == Some(n.as_str())] { (untrusted(n)) }
                    }
                }
                label for="workspace" { "Workspace" }
                input #workspace type="text" name="workspace" required spellcheck="false";
                p.hint { "A directory inside one of the tenant's roots, absolute or relative to the first: "
                    @for (i, r) in roots.iter().enumerate() { @if i > 0 { ", " } code { (r) } } }
                label for="input" { "Input (JSON)" }
                textarea #input name="input" rows="6" spellcheck="false" { "{}" }
                button.primary type="submit" { "Start" }
            }
        }
        h2 #loops { "A YAML loop of the workspace" }
        form.filters method="get" action="/runs/new#loops" {
            label { "Workspace "
                input #loop-workspace type="text" name="workspace" value=(asked) required spellcheck="false";
            }
            button type="submit" { "List its loops" }
        }
        @match &loops {
            Err(why) => { p.err role="alert" { (untrusted(why)) } }
            Ok(files) if files.is_empty() => {
                div.empty {
                    p { "No loop files in " code { (untrusted(&asked)) } "." }
                    p.muted { "A loop is a .yaml file with " code { "states:" } ", up to three directories down (" code { ".loops/" } " included)." }
                }
            }
            Ok(files) => {
                form.card.stack method="post" action="/runs" {
                    (ctx.csrf())
                    input type="hidden" name="workspace" value=(asked);
                    label for="loop" { "Loop file" }
                    select #loop name="loop" required {
                        @for f in files { option value=(f) { (untrusted(f)) } }
                    }
                    @if files.len() >= crate::loops::LISTED { p.hint { "The first " (files.len()) " loop files; start another through the API." } }
                    label for="loop-input" { "Input" }
                    textarea #loop-input name="input" rows="4" spellcheck="false" { "{}" }
                    p.hint { "A JSON object of the loop's context values, or text for its input key (as " code { "loopbox run LOOP.yaml --input" } ")." }
                    button.primary type="submit" { "Start the loop" }
                }
            }
        }
    };
    page(&ctx, "Start a run", "/runs", None, body).into_response()
}

/// Start a run from the form: the API's start, then the new run's page.
pub async fn start(State(server): State<Arc<Server>>, req: Request) -> Response {
    let a = match Acting::<api::StartBody>::from_request(req, &server).await {
        Ok(a) => a,
        Err(e) => return act::refused(&server, None, &e),
    };
    let caller = a.caller.clone();
    match api::start(State(server.clone()), a).await {
        Ok(r) => match act::json_of(r.into_response()).await {
            Some(v) if v["id"].is_string() => act::see(&format!(
                "/runs/{}?note=started",
                v["id"].as_str().unwrap_or_default()
            )),
            _ => act::unexpected(&server, &caller, "the run was started"),
        },
        Err(e) => act::refused(&server, Some(&caller), &e),
    }
}

/// A form's act on a run: cancel, resume, answer or tick, through the API.
pub async fn act(
    State(server): State<Arc<Server>>,
    Path((id, what)): Path<(String, String)>,
    req: Request,
) -> Response {
    let back = |note: &str| format!("/runs/{id}?note={note}");
    macro_rules! acting {
        ($t:ty) => {
            match Acting::<$t>::from_request(req, &server).await {
                Ok(a) => a,
                Err(e) => return act::refused(&server, None, &e),
            }
        };
    }
    let p = Path(id.clone());
    let s = State(server.clone());
    match what.as_str() {
        "cancel" => {
            let a = acting!(api::Nothing);
            let c = a.caller.clone();
            act::outcome(&server, &c, api::cancel(s, p, a).await, &back("cancelled"))
        }
        "resume" => {
            let a = acting!(api::ResumeBody);
            let c = a.caller.clone();
            act::outcome(&server, &c, api::resume(s, p, a).await, &back("resumed"))
        }
        "answer" => {
            let a = acting!(api::AnswerBody);
            let c = a.caller.clone();
            act::outcome(&server, &c, api::answer(s, p, a).await, &back("answered"))
        }
        "tick" => {
            let a = acting!(api::TickBody);
            let c = a.caller.clone();
            act::outcome(&server, &c, api::tick(s, p, a).await, &back("ticked"))
        }
        _ => error(
            &Ctx::anonymous(),
            axum::http::StatusCode::NOT_FOUND,
            "a run takes cancel, resume, answer or tick",
        ),
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct ShowQuery {
    #[serde(default)]
    note: Option<String>,
}

/// One run's page.
pub async fn show(
    State(server): State<Arc<Server>>,
    Viewer(caller): Viewer,
    Path(id): Path<String>,
    Query(q): Query<ShowQuery>,
) -> Response {
    let ctx = Ctx::of(&server, &caller);
    let view = match api::show(State(server.clone()), Authed(caller.clone()), Path(id)).await {
        Ok(axum::Json(v)) => v,
        Err(e) => return error(&ctx, e.status, &e.error),
    };
    let now = crate::db::now_ms();
    let status_text = view["status"].as_str().unwrap_or("");
    let finished = status_text
        .parse::<RunStatus>()
        .is_ok_and(RunStatus::is_final);
    let title = view["policy_name"]
        .as_str()
        .or(view["policy"].as_str())
        .map(untrusted)
        .unwrap_or_default();
    let body = run_page(&ctx, &view, now, act::notice(q.note.as_deref()));
    let refresh = (!finished).then_some(REFRESH_MS);
    page(&ctx, &format!("{title} · run"), "/runs", refresh, body).into_response()
}

/// What the run's latest decision waits for: an answer (`ask`), a tick (`pass`).
fn waits_for(view: &Value) -> Option<&'static str> {
    if view["status"] != "waiting" {
        return None;
    }
    let last = view["events"].as_array()?.last()?;
    match last["decision"]["type"].as_str()? {
        "ask" => Some("answer"),
        "pass" => Some("tick"),
        _ => None,
    }
}

/// An action's request in one line: `argv…` of an exec, a script's text, a prompt's.
fn request_line(req: &Value) -> String {
    untrusted(&crate::loops::view::command(req))
}

/// A YAML loop's path of states, the one it is in marked (`aria-current`)
/// while it runs; the last is where it ended once it has.
fn loop_path(lp: &Value) -> Markup {
    let empty = Vec::new();
    let path = lp["path"].as_array().unwrap_or(&empty);
    let ended = lp["ended"] == true;
    html! {
        ol.path aria-label="path of states" {
            @if lp["path_cut"] == true { li.muted { "…" } }
            @for (i, st) in path.iter().enumerate() {
                @let here = i + 1 == path.len() && (ended || lp["sub_loop"].is_null());
                li aria-current=[(here && !ended).then_some("step")] class=[here.then_some("here")] {
                    (text_of(st))
                }
            }
            @if let Some(sub) = lp["sub_loop"].as_str() {
                li.here aria-current="step" { (untrusted(sub)) " › " (text_of(&lp["state"])) }
            }
        }
    }
}

/// A loop's start input as its parts: the file, the input, the loop's text.
fn loop_input(input: &Value) -> Markup {
    html! {
        dl.facts {
            dt { "Loop file" } dd.mono.wrap { (text_of(&input["path"])) }
            dt { "Input" } dd { pre { (pretty(&input["input"])) } }
            @if let Some(env) = input["env"].as_object().filter(|e| !e.is_empty()) {
                dt { "Environment" } dd.mono.wrap { @for (k, _) in env { (untrusted(k)) " " } }
            }
        }
        details { summary { "The loop's text" } pre { (text_of(&input["yaml"])) } }
    }
}

fn run_page(ctx: &Ctx, v: &Value, now: i64, note: Option<&str>) -> Markup {
    let id = v["id"].as_str().unwrap_or_default();
    let st = v["status"].as_str().unwrap_or("");
    let finished = st.parse::<RunStatus>().is_ok_and(RunStatus::is_final);
    let policy = v["policy_name"]
        .as_str()
        .or(v["policy"].as_str())
        .unwrap_or("");
    let lp = v["loop"].is_object().then_some(&v["loop"]);
    let waits = waits_for(v);
    let empty = Vec::new();
    let approvals = v["approvals"].as_array().unwrap_or(&empty);
    let journal = v["journal"].as_array().unwrap_or(&empty);
    let events = v["events"].as_array().unwrap_or(&empty);
    html! {
        div.head {
            h1 { (untrusted(policy)) " " span.mono.muted { (id) } }
        }
        @if let Some(n) = note { p.note role="status" { (n) } }
        section #summary data-live {
            div.statusline {
                (status(st))
                @if v["driven"] == true { span.muted { " driven now" } }
                @if v["cancel_requested"] == true && !finished { span.muted { " · cancel requested" } }
                @if let Some(w) = waits { span.muted { " · waits for " @if w == "answer" { "an answer" } @else { "a tick" } } }
            }
            @if !v["outcome"].is_null() {
                div.outcome {
                    strong { "Outcome: " }
                    (text_of(&v["outcome"]["summary"]))
                    @if !v["outcome"]["data"].is_null() {
                        details { summary { "data" } pre { (pretty(&v["outcome"]["data"])) } }
                    }
                }
            }
            @if let Some(lp) = lp {
                div.loop {
                    strong { @if lp["ended"] == true { "Path: " } @else { "In state " (text_of(&lp["state"])) ": " } }
                    @if lp["path"].as_array().is_some_and(|p| !p.is_empty()) { (loop_path(lp)) }
                    @else { span.muted { "no state entered yet" } }
                    span.muted { (lp["steps"].as_u64().unwrap_or(0)) " step(s)" }
                }
            }
            dl.facts {
                @if let Some(lp) = lp {
                    dt { "Loop" } dd { (text_of(&lp["name"])) div.muted.mono { (text_of(&lp["file"])) " · " (text_of(&v["policy"])) } }
                } @else {
                    dt { "Policy" } dd { (untrusted(policy)) @if v["policy_name"].is_string() { div.muted.mono { (text_of(&v["policy"])) } } }
                }
                dt { "Digest" } dd.mono.wrap { (text_of(&v["policy_digest"])) }
                dt { "Tenant" } dd { (text_of(&v["tenant"])) }
                dt { "Workspace" } dd.mono.wrap { (text_of(&v["workspace"])) }
                dt { "Started" } dd { (age_of(v["started"].as_str().unwrap_or(""), now)) @if v["started_by"].is_string() { " by " (text_of(&v["started_by"])) } }
                dt { "Updated" } dd { (age_of(v["updated"].as_str().unwrap_or(""), now)) }
                dt { "Counts" } dd { (v["turns"].as_u64().unwrap_or(0)) " turns · " (v["actions"].as_u64().unwrap_or(0)) " actions · " (v["prompts"].as_u64().unwrap_or(0)) " prompts" }
                dt { "Spend" } dd { (spend_line(&v["spend"])) }
                dt { "Grants" } dd { (text_of(&v["grants"])) }
            }
            @if ctx.may(Role::Operator) && !finished {
                div.actions {
                    @if st == "interrupted" {
                        form.inline method="post" action={ "/runs/" (id) "/resume" } {
                            (ctx.csrf())
                            label.check { input type="checkbox" name="resend_turn" value="true"; " resend the agent turn" }
                            label.check { input type="checkbox" name="accept_config_change" value="true"; " accept a changed config" }
                            button type="submit" { "Resume" }
                        }
                    }
                    @if waits == Some("answer") {
                        form.inline method="post" action={ "/runs/" (id) "/answer" } {
                            (ctx.csrf())
                            label for="answer" { "Answer" }
                            input #answer type="text" name="text" required;
                            button.primary type="submit" { "Send answer" }
                        }
                    }
                    @if waits == Some("tick") {
                        form.inline method="post" action={ "/runs/" (id) "/tick" } {
                            (ctx.csrf())
                            label for="tick" { "Tick (JSON)" }
                            input #tick.mono type="text" name="payload" value="{}" required;
                            button type="submit" { "Send tick" }
                        }
                    }
                    form.inline method="post" action={ "/runs/" (id) "/cancel" } {
                        (ctx.csrf())
                        button.danger type="submit" { "Cancel run" }
                    }
                }
            }
        }
        section #approvals data-live {
            @if !approvals.is_empty() {
                h2 { "Approvals" }
                @for a in approvals { (approval_card(ctx, a, now, "run")) }
            }
        }
        section.log {
            h2 { "Live log" }
            pre #log data-run=(id) data-final[finished] aria-live="polite" {}
            p.muted.small #log-state {}
        }
        section #journal data-live {
            h2 { "Journal of actions" }
            @if journal.is_empty() {
                p.empty { "No actions yet." }
            } @else {
                @let total = v["journal_total"].as_u64().unwrap_or(0);
                @if total as usize > journal.len() { p.muted { "The latest " (journal.len()) " of " (total) "." } }
                table.journal {
                    thead { tr { th { "#" } @if lp.is_some() { th { "State" } } th { "Action" } th { "Outcome" } th.num { "Exit" } th.num { "Time" } th { "Started" } } }
                    tbody {
                        @for j in journal { (journal_row(j, now, lp.is_some())) }
                    }
                }
            }
        }
        @let network = v["network"].as_array().unwrap_or(&empty);
        @if !network.is_empty() {
            section #network data-live {
                h2 { "Network" }
                p.muted { (network.len()) " connection(s) through loopbox's proxy, "
                    (network.iter().filter(|c| c["allowed"] != true).count()) " refused." }
                table.journal {
                    thead { tr { th { "Destination" } th { "Side" } th { "Decision" } th.num { "Out / in" } th.num { "Time" } } }
                    tbody {
                        @for c in network {
                            tr {
                                td.mono data-label="Destination" { (text_of(&c["host"])) ":" (c["port"]) }
                                td data-label="Side" { (text_of(&c["side"])) }
                                td data-label="Decision" {
                                    @if c["allowed"] == true { "allowed: " } @else { strong { "refused: " } }
                                    (text_of(&c["rule"]))
                                }
                                td.num data-label="Out / in" { (c["bytes_out"].as_u64().unwrap_or(0)) " / " (c["bytes_in"].as_u64().unwrap_or(0)) " B" }
                                td.num data-label="Time" { (c["ms"].as_u64().unwrap_or(0)) " ms" }
                            }
                        }
                    }
                }
            }
        }
        @let turns = v["agent_turns"].as_array().unwrap_or(&empty);
        @if !turns.is_empty() {
            section #agent-turns data-live {
                h2 { "Agent turns" }
                table.journal {
                    thead { tr { th { "#" } th { "Model" } th.num { "Tokens in / out" } th.num { "Cost" } th { "Source" } } }
                    tbody {
                        @for t in turns {
                            tr {
                                td.mono data-label="#" { (t["event"]) "." (t["seq"]) }
                                td data-label="Model" { (text_of(&t["model"])) }
                                td.num data-label="Tokens" {
                                    @if t["unmetered"] == true { "-" }
                                    @else { (t["tokens"]["input"].as_u64().unwrap_or(0)) " / " (t["tokens"]["output"].as_u64().unwrap_or(0)) }
                                }
                                td.num data-label="Cost" {
                                    @match t["cost_usd"].as_f64() { Some(c) => (crate::spend::usd(c)), None => "-" }
                                }
                                td data-label="Source" { (text_of(&t["cost_source"])) }
                            }
                        }
                    }
                }
            }
        }
        section #timeline data-live {
            h2 { "Timeline" }
            @if events.is_empty() {
                p.empty { "No events yet." }
            } @else {
                @let total = v["events_total"].as_u64().unwrap_or(0);
                @if total as usize > events.len() { p.muted { "The latest " (events.len()) " of " (total) "." } }
                ol.timeline {
                    @for e in events { (event_item(e, now)) }
                }
            }
        }
        section #state data-live {
            h2 { "State" }
            @match v["state"].as_object() {
                Some(m) if !m.is_empty() => {
                    dl.state { @for (k, val) in m { dt.mono { (untrusted(k)) } dd { pre { (pretty(val)) } } } }
                }
                _ => { p.empty { "The policy keeps no state." } }
            }
        }
        section {
            h2 { "Grants and input" }
            details { summary { "Pinned grants (" (text_of(&v["grants"])) ")" } pre { (pretty(&v["pinned_grants"])) } }
            @if lp.is_some() && v["input"]["yaml"].is_string() {
                details { summary { "Start input" } (loop_input(&v["input"])) }
            } @else {
                details { summary { "Start input" } pre { (pretty(&v["input"])) } }
            }
        }
    }
}

fn journal_row(j: &Value, now: i64, in_loop: bool) -> Markup {
    let outcome = j["outcome"].as_str().unwrap_or("");
    let shown = match outcome {
        "ok" => "done",
        "error" => "failed",
        "running" => "running",
        _ => "interrupted",
    };
    html! {
        tr {
            td.mono data-label="#" { (j["event"]) "." (j["seq"]) }
            @if in_loop { td data-label="State" { (text_of(&j["state"])) } }
            td data-label="Action" {
                span.kind { (text_of(&j["kind"])) } " "
                code.wrap { @match j["command"].as_str() { Some(c) => (untrusted(c)), None => (request_line(&j["request"])) } }
                @if !j["error"].is_null() {
                    div.err { strong { (text_of(&j["error"]["kind"])) } ": " (text_of(&j["error"]["message"])) }
                }
                @let out = j["stdout"].as_str().unwrap_or("");
                @let err = j["stderr"].as_str().unwrap_or("");
                @if !out.is_empty() || !err.is_empty() {
                    details {
                        summary { "output" }
                        @if !out.is_empty() { pre.out { (untrusted(out)) } }
                        @if !err.is_empty() { pre.out.stderr { (untrusted(err)) } }
                    }
                }
            }
            td data-label="Outcome" {
                span class={ "status s-" (shown) } { (outcome) } @if j["timed_out"] == true { " (timed out)" }
                @if in_loop && outcome != "running" {
                    @if let Some(next) = j["then"].as_str() {
                        div.muted { @if let Some(v) = j["verdict"].as_str() { (untrusted(v)) " " } "→ " (untrusted(next)) }
                    }
                }
            }
            td.num data-label="Exit" { (text_of(&j["exit_code"])) }
            td.num data-label="Time" { @if let Some(ms) = j["duration_ms"].as_u64() { (ms) " ms" } }
            td data-label="Started" { (age_of(j["started"].as_str().unwrap_or(""), now)) }
        }
    }
}

/// A start event's input: a YAML loop's as its file and input, else as it is.
fn start_detail(input: &Value) -> String {
    // The API shows a JSON input as JSON, other text as a string.
    let parsed = match input {
        Value::String(t) => serde_json::from_str::<Value>(t).ok(),
        v => Some(v.clone()),
    };
    match parsed {
        Some(p) if p["yaml"].is_string() && p["path"].is_string() => format!(
            "loop {} · input {}",
            text_of(&p["path"]),
            text_of(&p["input"])
        ),
        _ => text_of(input),
    }
}

fn event_item(e: &Value, now: i64) -> Markup {
    let ev = &e["event"];
    let kind = ev["type"].as_str().unwrap_or("event");
    let detail = match kind {
        "start" => start_detail(&ev["input"]),
        "tick" => text_of(&ev["payload"]),
        "user-input" => text_of(&ev["text"]),
        "turn-complete" => text_of(&ev["response"]),
        "tool-call" => format!("{} {}", text_of(&ev["name"]), text_of(&ev["input"])),
        "custom" => format!("{} {}", text_of(&ev["name"]), text_of(&ev["payload"])),
        _ => text_of(ev),
    };
    let d = &e["decision"];
    let d_kind = d["type"].as_str();
    let d_text = match d_kind {
        Some("inject") => text_of(&d["message"]),
        Some("block" | "escalate") => text_of(&d["reason"]),
        Some("ask") => text_of(&d["question"]),
        Some("done") => text_of(&d["summary"]),
        Some("rewrite") => text_of(&d["payload"]),
        _ => String::new(),
    };
    html! {
        li {
            div.when { span.mono { "#" (e["seq"]) } " " (age_of(e["at"].as_str().unwrap_or(""), now)) }
            div {
                span.kind { (untrusted(kind)) } " " span.detail { (crate::ui::shorten(&detail, 300)) }
            }
            @if let Some(k) = d_kind {
                div.decision { "→ " strong { (untrusted(k)) }
                    @if d["type"] == "done" { @if d["success"] == true { " (success)" } @else { " (failure)" } }
                    @if !d_text.is_empty() { ": " (crate::ui::shorten(&d_text, 300)) } }
            } @else if e["pending"] == true {
                div.decision.muted { "→ being handled" }
            }
            @if !e["error"].is_null() { div.err { (crate::ui::shorten(&text_of(&e["error"]), 300)) } }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A run whose every word is hostile, as the API shows it.
    fn hostile_view() -> Value {
        let img = "\"><img src=x onerror=alert(1)>";
        json!({
            "id": "r1", "status": "done", "policy": "<script>alert(1)</script>.wasm",
            "policy_name": "<script>alert(2)</script>", "tenant": "web", "workspace": "/w/\"><b>",
            "started": "2026-11-27T00:15:53.565Z", "updated": "2026-11-27T00:15:53.565Z",
            "started_by": "web/<i>x</i>", "grants": "[policies.<script>]", "pinned_grants": {"<script>": 1},
            "outcome": {"summary": "<script>alert(3)</script>", "data": {"k": img}},
            "input": {"argv": ["echo", img]},
            "events": [{"seq": 1, "at": "2026-11-27T00:15:53.565Z",
                        "event": {"type": "start", "input": {"x": "<script>alert(4)</script>"}},
                        "decision": {"type": "done", "success": true, "summary": "<script>alert(5)</script>"},
                        "error": null, "pending": false}],
            "journal": [{"event": 1, "seq": 1, "kind": "shell", "request": {"kind": "exec", "argv": ["echo", img]},
                         "outcome": "ok", "exit_code": 0, "duration_ms": 3, "stdout": format!("{img}\n"), "stderr": "<script>",
                         "error": null, "started": "2026-11-27T00:15:53.565Z"}],
            "state": {"<k>": "<script>alert(6)</script>"},
            "approvals": [],
        })
    }

    #[test]
    fn a_hostile_runs_words_are_escaped_on_its_page() {
        let ctx = Ctx::anonymous();
        let html = run_page(&ctx, &hostile_view(), 0, None).into_string();
        // Nothing the run wrote becomes markup: no element, no attribute.
        assert!(!html.contains("<script"), "{html}");
        assert!(!html.contains("<img"), "{html}");
        assert!(!html.contains("<b>") && !html.contains("<i>"), "{html}");
        // ... and it is all there to read.
        assert!(
            html.contains("&lt;script&gt;alert(3)&lt;/script&gt;"),
            "{html}"
        );
        assert!(
            html.contains("&quot;&gt;&lt;img src=x onerror=alert(1)&gt;"),
            "{html}"
        );
    }

    #[test]
    fn text_that_reorders_or_hides_reads_as_escapes() {
        // An approver must read the command that runs, not one it poses as.
        let line = request_line(&json!({"argv": ["echo", "safe\u{202e}fr- mr"]}));
        assert!(
            line.contains("\\u{202e}") && !line.contains('\u{202e}'),
            "{line}"
        );
    }

    #[test]
    fn the_decision_a_waiting_run_stands_at_picks_its_form() {
        let v = |d: &str| json!({"status": "waiting", "events": [{"decision": {"type": d}}]});
        assert_eq!(waits_for(&v("ask")), Some("answer"));
        assert_eq!(waits_for(&v("pass")), Some("tick"));
        assert_eq!(waits_for(&v("done")), None);
        assert_eq!(
            waits_for(&json!({"status": "done", "events": [{"decision": {"type": "ask"}}]})),
            None
        );
    }

    #[test]
    fn the_pager_keeps_the_filters() {
        let q = ListQuery {
            status: Some("done".into()),
            policy: Some("a&b".into()),
            ..Default::default()
        };
        assert_eq!(
            list_href(&q, Some("r9")),
            "/runs?status=done&policy=a%26b&before=r9"
        );
        assert_eq!(list_href(&ListQuery::default(), None), "/runs");
    }
}

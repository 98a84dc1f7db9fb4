//! The approvals inbox: each approval with the exact request it is bound to
//! (the argv word by word or the script whole, the program it resolved to,
//! its directory, input and variables), the rule that asks, the policy with
//! its digest and signer, and the digest itself; approve and deny buttons
//! (approvers only) with a reason, whose form names the digest shown, so a
//! request that changed after the page was drawn is refused by the API.
//! Above them, the questions of YAML loops' `human_approval` states the
//! tenant's runs wait on, with the prompt and approve, reject and edit
//! buttons (approvers only), answered through the API's `answer`.

use std::sync::Arc;

use axum::extract::{FromRequest, Path, Query, Request, State};
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};
use serde::Deserialize;
use serde_json::Value;

use super::act;
use super::page::{Ctx, Viewer, age, error, page, pretty, status, text_of, until, untrusted};
use crate::db::approvals::{ApprovalFilter, ApprovalStatus};
use crate::serve::Server;
use crate::serve::api::approvals as api;
use crate::serve::api::extract::Acting;
use crate::serve::auth::Role;

/// Approvals the inbox shows at once.
const SHOWN: usize = 100;

#[derive(Debug, Default, Deserialize)]
pub struct InboxQuery {
    /// `pending` (the default) or `all`.
    #[serde(default)]
    show: Option<String>,
    #[serde(default)]
    note: Option<String>,
}

pub async fn inbox(
    State(server): State<Arc<Server>>,
    Viewer(caller): Viewer,
    Query(q): Query<InboxQuery>,
) -> Response {
    let ctx = Ctx::of(&server, &caller);
    let all = q.show.as_deref() == Some("all");
    let list = server.store.db().approvals(&ApprovalFilter {
        tenant: Some(caller.tenant.clone()),
        run: None,
        status: (!all).then_some(ApprovalStatus::Pending),
        limit: SHOWN,
    });
    let list: Vec<Value> = match list {
        Ok(l) => l
            .into_iter()
            .map(|a| crate::serve::api::approvals::view(&a))
            .collect(),
        Err(e) => {
            return error(
                &ctx,
                axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                &format!("{e:#}"),
            );
        }
    };
    let now = crate::db::now_ms();
    let asked = match questions(&server, &caller.tenant) {
        Ok(q) => q,
        Err(e) => {
            return error(
                &ctx,
                axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                &format!("{e:#}"),
            );
        }
    };
    let body = html! {
        div.head { h1 { "Approvals" } }
        @if let Some(n) = act::notice(q.note.as_deref()) { p.note role="status" { (n) } }
        @if !asked.is_empty() {
            div #questions {
                @for (run, question) in &asked { (question_card(&ctx, run, question)) }
            }
        }
        nav.tabs {
            a href="/approvals" aria-current=[(!all).then_some("page")] { "Pending" }
            a href="/approvals?show=all" aria-current=[all.then_some("page")] { "All" }
        }
        div #inbox data-live {
            @if list.is_empty() {
                div.empty {
                    @if all { p { "No approvals yet." } } @else { p { "Nothing waits for a decision." } }
                    p.muted { "An action a policy's grants ask about (" code { "shell.ask" } ") waits here for an approver." }
                }
            } @else {
                @for a in &list { (approval_card(&ctx, a, now, "inbox")) }
            }
        }
    };
    page(&ctx, "Approvals", "/approvals", Some(3000), body).into_response()
}

/// The tenant's runs that wait on a YAML loop's `human_approval` question
/// (builtin:fsm asks nothing else), newest first, with the question.
fn questions(server: &Server, tenant: &str) -> anyhow::Result<Vec<(String, String)>> {
    let db = server.store.db();
    let waiting = db.run_page(
        crate::db::page::Whose::Tenant(tenant),
        &crate::db::page::RunFilter {
            status: Some(crate::db::RunStatus::Waiting),
            policy: Some(crate::loops::FSM.into()),
            before: None,
            limit: SHOWN,
        },
    )?;
    let mut asked = vec![];
    for row in waiting {
        let run = db.existing_run(&row.id)?;
        if let crate::run::driver::Next::Act {
            decision: crate::bindings::Decision::Ask(q),
            ..
        } = crate::run::driver::resume_point(db, &run)?
        {
            asked.push((row.id, q));
        }
    }
    Ok(asked)
}

/// A loop's question: its prompt as the loop wrote it, and for an approver
/// one form whose buttons answer `approve`, `reject` (the text its reason)
/// or `edit` (the text the replacement).
pub fn question_card(ctx: &Ctx, run: &str, question: &str) -> Markup {
    html! {
        article.card.approval id={ "question-" (run) } {
            header {
                (status("pending"))
                " " strong.what { "A loop asks for a verdict" }
                span.muted { " · run " a.mono href={ "/runs/" (run) } { (run) } }
            }
            dl.facts {
                dt { "Question" } dd { pre.exact data-field="question" { (untrusted(question)) } }
            }
            @if ctx.may(Role::Approver) {
                form.decide method="post" action={ "/questions/" (run) } {
                    (ctx.csrf())
                    label for={ "text-" (run) } { "Reason, or the replacement text for Edit" }
                    input id={ "text-" (run) } type="text" name="text" maxlength="2000";
                    div.buttons {
                        button.approve type="submit" name="verdict" value="approve" { "✓ Approve" }
                        button.deny type="submit" name="verdict" value="reject" { "✗ Reject" }
                        button type="submit" name="verdict" value="edit" { "✎ Edit" }
                    }
                }
                p.muted.cli {
                    "Or from a terminal, with LOOPBOX_TOKEN set to an approver's token: "
                    code.wrap data-field="cli" { (crate::ui::runs_command(&format!("approve {run}"))) }
                }
            }
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuestionForm {
    verdict: String,
    #[serde(default)]
    text: String,
}

/// The answer a question's form gives: its verdict, then the text (a
/// reject's reason, an edit's replacement); `None` for another verdict.
fn answer_text(f: &QuestionForm) -> Option<String> {
    let text = f.text.trim();
    // One line, as a terminal's answer is: the loop reads the first word.
    let text = text.lines().next().unwrap_or_default();
    match (f.verdict.as_str(), text) {
        ("approve", _) => Some("approve".into()),
        ("reject", "") => Some("reject".into()),
        ("reject", r) => Some(format!("reject {r}")),
        ("edit", t) if !t.is_empty() => Some(format!("edit {t}")),
        _ => None,
    }
}

/// A question's form: the API's `answer` (an approver's act), then the inbox.
pub async fn answer_question(
    State(server): State<Arc<Server>>,
    Path(run): Path<String>,
    req: Request,
) -> Response {
    let a = match Acting::<QuestionForm>::from_request(req, &server).await {
        Ok(a) => a,
        Err(e) => return act::refused(&server, None, &e),
    };
    let Some(text) = answer_text(&a.body) else {
        return error(
            &Ctx::of(&server, &a.caller),
            axum::http::StatusCode::BAD_REQUEST,
            "answer approve, reject (with a reason if you like), or edit with the replacement text",
        );
    };
    let caller = a.caller.clone();
    let acting = Acting {
        caller: a.caller,
        body: crate::serve::api::runs::AnswerBody { text },
    };
    let result = crate::serve::api::runs::answer(State(server.clone()), Path(run), acting).await;
    match result {
        Ok(_) => act::see("/approvals?note=answered"),
        Err(e) => act::refused(&server, Some(&caller), &e),
    }
}

/// A time of the API's JSON (RFC 3339) in ms, to show as an age.
fn at_ms(v: &Value) -> Option<i64> {
    v.as_str().and_then(super::page::parse_rfc3339)
}

/// The request's argv, each word as a shell would need it quoted, never shortened.
fn argv_line(argv: &[Value]) -> String {
    argv.iter()
        .map(|a| crate::exec::grants::shell_quote(a.as_str().unwrap_or_default()))
        .map(|w| untrusted(&w))
        .collect::<Vec<_>>()
        .join(" ")
}

/// One approval: what it is bound to, and for a pending one the buttons its
/// caller's role may use. `from` is the page the decision returns to.
pub fn approval_card(ctx: &Ctx, a: &Value, now: i64, from: &str) -> Markup {
    let id = a["id"].as_str().unwrap_or_default();
    let run = a["run_id"].as_str().unwrap_or_default();
    let st = a["status"].as_str().unwrap_or("");
    let bound = &a["request"];
    let req = &bound["request"];
    let pending = st == "pending";
    html! {
        article.card.approval id={ "approval-" (id) } {
            header {
                (status(st))
                " " strong.what { (text_of(&a["what"])) }
                span.muted { " · run " a.mono href={ "/runs/" (run) } { (run) } }
                @if let Some(at) = at_ms(&a["requested"]) { span.muted { " · asked " (age(at, now)) } }
            }
            dl.facts {
                @if let Some(argv) = req["argv"].as_array() {
                    dt { "Command" } dd { code.exact.wrap data-field="command" { (argv_line(argv)) } }
                    dt { "Words" } dd { code.wrap { (text_of(&req["argv"])) } }
                }
                @if let Some(script) = req["script"].as_str().or(req["source"].as_str()) {
                    dt { "Script" } dd { pre.exact data-field="command" { (untrusted(script)) } }
                }
                @if !req["program"].is_null() { dt { "Program" } dd.mono.wrap { (text_of(&req["program"])) } }
                @if !req["cwd"].is_null() { dt { "Directory" } dd.mono.wrap { (text_of(&req["cwd"])) } }
                @if let Some(stdin) = req["stdin"].as_str() { dt { "Input" } dd { pre { (untrusted(stdin)) } } }
                @if req["env"].as_array().is_some_and(|e| !e.is_empty()) || req["env"].as_object().is_some_and(|e| !e.is_empty()) {
                    dt { "Variables" } dd { pre { (pretty(&req["env"])) } }
                }
                @if req["argv"].is_null() && req["script"].is_null() && req["source"].is_null() {
                    dt { "Request" } dd { pre { (pretty(req)) } }
                }
                dt { "Rule" } dd.mono.wrap { (text_of(&a["rule"])) }
                dt { "Policy" } dd.wrap { (text_of(&bound["policy"])) div.mono.muted { (text_of(&bound["policy_digest"])) } }
                dt { "Signer" } dd.wrap { @if bound["signer"].is_null() { "unsigned" } @else { (text_of(&bound["signer"])) } }
                dt { "Digest" } dd.mono.wrap data-field="digest" { (text_of(&a["digest"])) }
                @if pending {
                    @if let Some(d) = at_ms(&a["deadline"]) { dt { "Expires" } dd { "declined by itself " (until(d - now)) } }
                } @else {
                    dt { "Decided" } dd {
                        @if !a["decided_by"].is_null() { "by " (text_of(&a["decided_by"])) " " }
                        @if let Some(at) = at_ms(&a["decided"]) { (age(at, now)) }
                        @if !a["reason"].is_null() { div { "“" (text_of(&a["reason"])) "”" } }
                    }
                }
            }
            @if pending && ctx.may(Role::Approver) {
                form.decide method="post" action={ "/approvals/" (id) "/approve?from=" (from) } {
                    (ctx.csrf())
                    input type="hidden" name="digest" value=(a["digest"].as_str().unwrap_or_default());
                    label for={ "reason-" (id) } { "Reason (optional)" }
                    input id={ "reason-" (id) } type="text" name="reason" maxlength="2000";
                    div.buttons {
                        button.approve type="submit" { "✓ Approve" }
                        button.deny type="submit" formaction={ "/approvals/" (id) "/deny?from=" (from) } { "✗ Deny" }
                    }
                }
            }
            @if pending && ctx.may(Role::Approver) {
                p.muted.cli {
                    "Or from a terminal, with LOOPBOX_TOKEN set to an approver's token: "
                    code.wrap data-field="cli" { (terminal_command(run, id, a["digest"].as_str().unwrap_or_default())) }
                }
            }
        }
    }
}

/// The command that approves `approval` of `run` from a terminal, as the
/// dashboard prints it: this server's URL, the approval and the digest shown.
fn terminal_command(run: &str, approval: &str, digest: &str) -> String {
    crate::ui::runs_command(&format!(
        "approve {run} --approval {approval} --digest {}",
        digest.chars().take(16).collect::<String>()
    ))
}

#[derive(Debug, Default, Deserialize)]
pub struct DecideQuery {
    #[serde(default)]
    from: Option<String>,
}

/// Approve or deny from a form: the API's decision, then the page it came from.
pub async fn decide(
    State(server): State<Arc<Server>>,
    Path((id, verdict)): Path<(String, String)>,
    Query(q): Query<DecideQuery>,
    req: Request,
) -> Response {
    if verdict != "approve" && verdict != "deny" {
        return error(
            &Ctx::anonymous(),
            axum::http::StatusCode::NOT_FOUND,
            "an approval takes approve or deny",
        );
    }
    let a = match Acting::<api::DecideBody>::from_request(req, &server).await {
        Ok(a) => a,
        Err(e) => return act::refused(&server, None, &e),
    };
    let caller = a.caller.clone();
    let result = if verdict == "approve" {
        api::approve(State(server.clone()), Path(id), a).await
    } else {
        api::deny(State(server.clone()), Path(id), a).await
    };
    let note = if verdict == "approve" {
        "approved"
    } else {
        "denied"
    };
    match result {
        Ok(axum::Json(v)) => match (q.from.as_deref(), v["run_id"].as_str()) {
            (Some("run"), Some(run)) => act::see(&format!("/runs/{run}?note={note}")),
            _ => act::see(&format!("/approvals?note={note}")),
        },
        Err(e) => act::refused(&server, Some(&caller), &e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pending(argv: Value) -> Value {
        json!({
            "id": "a1", "run_id": "r1", "status": "pending", "what": "exec `tee`", "rule": "policies.p.shell.ask[0]",
            "digest": "d1g", "requested": "1970-01-01T00:00:00.000Z", "deadline": "1970-01-01T01:00:00.000Z",
            "request": {"request": {"kind": "exec", "argv": argv, "program": "/usr/bin/tee", "cwd": "/w", "env": [], "stdin": "x\n"},
                        "rule": "r", "policy": "/p.wasm", "policy_digest": "pd", "signer": null, "grants": "g"},
        })
    }

    #[test]
    fn a_questions_form_answers_with_the_verdict_and_one_line_of_text() {
        let f = |verdict: &str, text: &str| {
            answer_text(&QuestionForm {
                verdict: verdict.into(),
                text: text.into(),
            })
        };
        assert_eq!(f("approve", "ignored").as_deref(), Some("approve"));
        assert_eq!(f("reject", "").as_deref(), Some("reject"));
        assert_eq!(
            f("reject", " too risky\nmore").as_deref(),
            Some("reject too risky")
        );
        assert_eq!(f("edit", "use 4").as_deref(), Some("edit use 4"));
        // An edit needs its replacement; no other verdict exists.
        assert_eq!(f("edit", "  "), None);
        assert_eq!(f("timeout", "x"), None);
        // The prompt is the loop's text: shown inert, and no form for an operator.
        let mut ctx = Ctx::anonymous();
        ctx.caller = Some(crate::serve::auth::Caller {
            tenant: "t".into(),
            role: Role::Operator,
            name: "n".into(),
            token_id: "i".into(),
            via: crate::serve::auth::Via::Bearer,
        });
        let html = question_card(&ctx, "r1", "Prompt: <script>x</script>").into_string();
        assert!(
            html.contains("&lt;script&gt;") && !html.contains("<form"),
            "{html}"
        );
    }

    #[test]
    fn the_exact_command_is_shown_whole_and_the_form_names_its_digest() {
        let long = "a".repeat(500);
        let a = pending(json!(["tee", "-a", long, "it's"]));
        let mut ctx = Ctx::anonymous();
        let html = approval_card(&ctx, &a, 0, "inbox").into_string();
        assert!(
            html.contains(&format!("tee -a {long} 'it'\\''s'")),
            "{html}"
        );
        assert!(html.contains("/usr/bin/tee") && html.contains("unsigned") && html.contains("d1g"));
        // Its times, RFC 3339 in the API's JSON, shown as ages.
        assert!(
            html.contains("asked ") && html.contains("declined by itself in 1 h"),
            "{html}"
        );
        // Nobody signed in (or a role too low): no buttons.
        assert!(!html.contains("<form"), "{html}");
        ctx.caller = Some(crate::serve::auth::Caller {
            tenant: "t".into(),
            role: Role::Approver,
            name: "n".into(),
            token_id: "i".into(),
            via: crate::serve::auth::Via::Session {
                id: "s".into(),
                csrf: "C5RF".into(),
            },
        });
        let html = approval_card(&ctx, &a, 0, "inbox").into_string();
        assert!(html.contains(r#"name="digest" value="d1g""#), "{html}");
        assert!(
            html.contains("loopbox runs approve r1 --approval a1 --digest d1g"),
            "{html}"
        );
        assert!(html.contains(r#"name="csrf_token" value="C5RF""#), "{html}");
        assert!(
            html.contains(r#"formaction="/approvals/a1/deny?from=inbox""#),
            "{html}"
        );
        ctx.caller.as_mut().unwrap().role = Role::Operator;
        assert!(
            !approval_card(&ctx, &a, 0, "inbox")
                .into_string()
                .contains("Approve")
        );
    }
}

//! Refused acts leave a trace: an act that needs a role and is refused before
//! it reaches the store (the role is too low, a required field is missing, a
//! name is invalid) is written to the audit log with who asked, what and
//! why, as the acts the store refuses are ([`crate::db::Db::audit_act`]).
//! An admin reading the log sees a viewer's attempted approval as plainly as
//! an approval.

use serde_json::{Value, json};

use super::error::{ApiError, ApiResult};
use crate::db::audit::AuditEntry;
use crate::serve::Server;
use crate::serve::auth::{Caller, Role};

/// What was asked: the audit log's act (`approve`, `token.create`, ...) and
/// what it was done to (a run, an approval, a token's name).
#[derive(Debug, Clone, Copy)]
pub struct Asked<'a> {
    pub act: &'a str,
    pub target: &'a str,
}

/// Record `e`, the refusal of `asked` by `caller`, and give it back to answer
/// with. `detail` adds what the request carried (the role a token was asked
/// for). A store that cannot write the row does not turn the refusal into a
/// 500: the caller is still told why, and the server's log says what was lost.
pub fn refuse(
    server: &Server,
    caller: &Caller,
    asked: Asked<'_>,
    detail: Option<Value>,
    e: ApiError,
) -> ApiError {
    let mut d = json!({"status": e.status.as_u16(), "role": caller.role});
    if let (Some(Value::Object(more)), Some(d)) = (detail, d.as_object_mut()) {
        d.extend(more);
    }
    let entry = AuditEntry {
        actor: caller.actor(),
        tenant: Some(caller.tenant.clone()),
        act: asked.act.to_string(),
        target: crate::ui::one_line(asked.target),
        digest: None,
        outcome: format!("refused: {}", e.error),
        detail: Some(d.to_string()),
    };
    if let Err(w) = server.store.db().audit_note(&entry) {
        crate::errln!(
            "loopbox serve: recording the refusal of `{}` by {} failed: {w:#}",
            asked.act,
            entry.actor
        );
    }
    e
}

/// Ok when `caller` has the `needed` role to do `what` (words for the
/// message, `asked` for the audit log); otherwise 403, recorded.
pub fn require(
    server: &Server,
    caller: &Caller,
    needed: Role,
    what: &str,
    asked: Asked<'_>,
) -> ApiResult<()> {
    caller.may(needed, what).map_err(|why| {
        refuse(
            server,
            caller,
            asked,
            Some(json!({"needs": needed})),
            ApiError::forbidden(why),
        )
    })
}

/// `r`, its refusal (a 4xx but `except`) recorded as [`refuse`] does: for
/// acts whose checks are many and spread (starting a run).
pub fn recorded<T>(
    server: &Server,
    caller: &Caller,
    asked: Asked<'_>,
    except: &[u16],
    r: ApiResult<T>,
) -> ApiResult<T> {
    r.map_err(|e| {
        let status = e.status.as_u16();
        if (400..500).contains(&status) && !except.contains(&status) {
            refuse(server, caller, asked, None, e)
        } else {
            e
        }
    })
}

//! What a tenant's runs spent on their agents: `GET /api/v1/spend` (viewer).
//! `day` is what the tenant's daily budgets (`tenants.NAME.max_cost_usd_per_day`,
//! `max_tokens_per_day`) count now: the turns recorded in the last 24 hours, by
//! the minute (see [`crate::serve::quota`]); `total` is every run's, ever.
//! Each run's own is in `GET /api/v1/runs` and `GET /api/v1/runs/ID` (`spend`).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

use super::error::ApiResult;
use super::extract::Authed;
use crate::db::now_ms;
use crate::serve::Server;
use crate::ui::rfc3339;

pub async fn tenant(
    State(server): State<Arc<Server>>,
    Authed(caller): Authed,
) -> ApiResult<Json<Value>> {
    let now = now_ms();
    let t = server.tenants.named(&caller.tenant)?;
    let day = server.spent_today(&caller.tenant, now)?;
    let total = server.store.tenant_spent(&caller.tenant)?;
    let mut day_json = day.json();
    day_json["since"] = json!(rfc3339(now - 24 * 3_600_000));
    Ok(Json(json!({
        "tenant": caller.tenant,
        "day": day_json,
        "total": total.json(),
        "budgets": {
            "max_cost_usd_per_day": t.max_cost_usd_per_day,
            "max_tokens_per_day": t.max_tokens_per_day,
        },
    })))
}

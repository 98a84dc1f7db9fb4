//! `spend`: what the run has spent on its agent, and its budgets, for the
//! policy to read (contract 0.4.0). The totals are a journaled call: a
//! replayed event is answered what the first delivery read, so a policy that
//! decides from them decides the same again; the budgets are the run's pinned
//! config, the same on every delivery.

use std::sync::Arc;

use anyhow::Result;
use wasmtime::component::{HasSelf, Linker};

use crate::bindings::loopbox::policy::spend::{self, RunBudget, Totals};
use crate::db::Db;
use crate::journal::{Journal, Step};
use crate::limits::meter::Meter;
use crate::spend::budget::SpendBudget;

pub struct SpendHost {
    db: Db,
    run: String,
    meter: Arc<Meter>,
    journal: Journal,
    budget: SpendBudget,
}

impl SpendHost {
    pub fn new(
        db: Db,
        run: String,
        meter: Arc<Meter>,
        journal: Journal,
        budget: SpendBudget,
    ) -> SpendHost {
        SpendHost {
            db,
            run,
            meter,
            journal,
            budget,
        }
    }
}

fn totals_of(t: &crate::spend::Totals) -> Totals {
    Totals {
        turns: t.turns,
        input_tokens: t.tokens.input,
        cache_read_tokens: t.tokens.cache_read,
        cache_write_tokens: t.tokens.cache_write,
        output_tokens: t.tokens.output,
        cost_usd: t.cost_usd,
        cost_known: t.cost_known(),
    }
}

impl spend::Host for SpendHost {
    async fn spent(&mut self) -> wasmtime::Result<Totals> {
        let _call = self.meter.call()?;
        let seq = match self.journal.step("spend", "") {
            Ok(Step::Replayed(text)) => {
                let t: crate::spend::Totals = serde_json::from_str(&text).map_err(|e| {
                    crate::error::host_err(anyhow::anyhow!(
                        "the journal's spend totals are damaged: {e}: {text}"
                    ))
                })?;
                return Ok(totals_of(&t));
            }
            // Reading the totals changes nothing: one in flight is read again.
            Ok(Step::InFlight(seq) | Step::Live(seq)) => seq,
            Err(e) => return Err(e.into_wasm()),
        };
        let t = self.db.spent(&self.run).map_err(crate::error::host_err)?;
        let text = serde_json::to_string(&t).map_err(crate::error::host_err)?;
        self.journal.note(seq, "spend", "", &text);
        Ok(totals_of(&t))
    }

    async fn budget(&mut self) -> wasmtime::Result<RunBudget> {
        let _call = self.meter.call()?;
        Ok(RunBudget {
            max_cost_usd: self.budget.max_cost_usd,
            max_tokens: self.budget.max_tokens,
        })
    }
}

/// Link `spend` into `linker`; `get` finds this capability's host state in the store's data.
pub fn add_to_linker<T: Send + 'static>(
    linker: &mut Linker<T>,
    get: fn(&mut T) -> &mut SpendHost,
) -> Result<()> {
    spend::add_to_linker::<T, HasSelf<SpendHost>>(linker, get).map_err(crate::wasm_err)
}

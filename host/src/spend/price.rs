//! `[prices]`: dollars per million tokens, per model, for agents that report
//! tokens but no cost (Codex, Gemini CLI, a chat-completions server, a hook
//! session's transcript). Claude Code reports its own figure
//! (`total_cost_usd`), which a price never overrides.
//!
//! ```toml
//! [prices."gpt-5.1-codex"]
//! input_per_mtok = 1.25
//! output_per_mtok = 10.0
//! cache_read_per_mtok = 0.125     # default: input_per_mtok
//!
//! [prices.default]                # a model no other entry names, or none named
//! input_per_mtok = 3.0
//! output_per_mtok = 15.0
//! ```
//!
//! A model is found by its exact name, else by the longest entry its name
//! starts with (`claude-sonnet-4-5` prices `claude-sonnet-4-5-20250929`), else
//! `default`. The figures are the user's: loopbox ships no price list, since
//! prices change and only the user knows theirs.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Charge, CostSource, Tokens, Usage};

/// One model's price, dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    pub input_per_mtok: f64,
    pub output_per_mtok: f64,
    /// Input read from a prompt cache; `input_per_mtok` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_per_mtok: Option<f64>,
    /// Input written to a prompt cache; `input_per_mtok` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_per_mtok: Option<f64>,
}

/// `[prices]`: model name to its price.
pub type Prices = BTreeMap<String, Price>;

/// The entry that prices a model no other entry names.
pub const DEFAULT: &str = "default";

impl Price {
    /// What `tokens` cost at this price.
    pub fn cost(&self, t: &Tokens) -> f64 {
        let cached = t.cache_read.saturating_add(t.cache_write);
        let plain = t.input.saturating_sub(cached);
        let rate = |tokens: u64, per_mtok: f64| tokens as f64 * per_mtok / 1_000_000.0;
        rate(plain, self.input_per_mtok)
            + rate(t.output, self.output_per_mtok)
            + rate(
                t.cache_read,
                self.cache_read_per_mtok.unwrap_or(self.input_per_mtok),
            )
            + rate(
                t.cache_write,
                self.cache_write_per_mtok.unwrap_or(self.input_per_mtok),
            )
    }
}

/// Check `[prices]`: every figure a finite, non-negative number.
pub fn validate(prices: &Prices) -> Result<(), String> {
    for (model, p) in prices {
        let figures = [
            ("input_per_mtok", Some(p.input_per_mtok)),
            ("output_per_mtok", Some(p.output_per_mtok)),
            ("cache_read_per_mtok", p.cache_read_per_mtok),
            ("cache_write_per_mtok", p.cache_write_per_mtok),
        ];
        for (key, value) in figures {
            if let Some(v) = value
                && !(v.is_finite() && v >= 0.0)
            {
                return Err(format!(
                    "prices.\"{}\".{key} = {v} is not a price: give dollars per million tokens, 0 or more",
                    model.escape_debug()
                ));
            }
        }
        if model.is_empty() {
            return Err("[prices]: a model name cannot be empty".into());
        }
    }
    Ok(())
}

/// The price of `model`: its entry, the longest entry it starts with, or `default`.
pub fn find<'a>(prices: &'a Prices, model: &str) -> Option<&'a Price> {
    if model.is_empty() {
        return prices.get(DEFAULT);
    }
    prices
        .get(model)
        .or_else(|| {
            prices
                .iter()
                .filter(|(k, _)| k.as_str() != DEFAULT && model.starts_with(k.as_str()))
                .max_by_key(|(k, _)| k.len())
                .map(|(_, p)| p)
        })
        .or_else(|| prices.get(DEFAULT))
}

/// Price one turn: the agent's own figure when it gave one, else each model's
/// tokens at its price (`fallback` names the model when the agent named none:
/// the model the request asked for). Unknown when a model has no price.
pub fn charge(usage: &Usage, prices: &Prices, fallback: Option<&str>) -> Charge {
    let named = |m: &str| {
        if m.is_empty() {
            fallback.unwrap_or("").to_string()
        } else {
            m.to_string()
        }
    };
    let model = usage
        .main_model()
        .map(String::from)
        .or_else(|| fallback.map(String::from));
    let tokens = usage.tokens();
    let (cost_usd, source) = match usage.cost_usd {
        Some(c) => (Some(c), CostSource::Agent),
        None => {
            let priced: Option<f64> = usage
                .models
                .iter()
                .map(|(m, t)| find(prices, &named(m)).map(|p| p.cost(t)))
                .sum();
            match priced {
                Some(c) if !usage.models.is_empty() => (Some(c), CostSource::Prices),
                _ => (None, CostSource::Unknown),
            }
        }
    };
    Charge {
        unmetered: false,
        model,
        tokens,
        cost_usd,
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prices(text: &str) -> Prices {
        let p: Prices = toml::from_str(text).unwrap();
        validate(&p).unwrap();
        p
    }

    #[test]
    fn tokens_are_priced_per_model_with_cache_rates() {
        let p = prices(
            "[\"claude-sonnet-4-5\"]\ninput_per_mtok = 3.0\noutput_per_mtok = 15.0\ncache_read_per_mtok = 0.3\ncache_write_per_mtok = 3.75\n\
             [\"claude-sonnet\"]\ninput_per_mtok = 100.0\noutput_per_mtok = 100.0\n",
        );
        let t = Tokens {
            input: 1_000_000 + 2_000_000 + 400_000,
            output: 100_000,
            cache_read: 2_000_000,
            cache_write: 400_000,
        };
        // 1M plain input at $3, 100k output at $15, 2M cache reads at $0.30, 400k writes at $3.75.
        let cost = find(&p, "claude-sonnet-4-5-20250929").unwrap().cost(&t);
        assert!((cost - (3.0 + 1.5 + 0.6 + 1.5)).abs() < 1e-9, "{cost}");
        // The longest prefix wins; an unknown model without `default` has no price.
        assert_eq!(find(&p, "claude-sonnet-3").unwrap().input_per_mtok, 100.0);
        assert!(find(&p, "gpt-5").is_none());
    }

    #[test]
    fn the_agents_own_figure_wins_and_a_model_without_a_price_is_unknown() {
        let p = prices("[default]\ninput_per_mtok = 1.0\noutput_per_mtok = 2.0\n");
        let usage = Usage {
            models: vec![(
                String::new(),
                Tokens {
                    input: 1_000_000,
                    output: 1_000_000,
                    ..Default::default()
                },
            )],
            cost_usd: None,
        };
        let c = charge(&usage, &p, Some("gpt-5"));
        assert_eq!(
            (c.cost_usd, c.source, c.model.as_deref()),
            (Some(3.0), CostSource::Prices, Some("gpt-5"))
        );
        let c = charge(&usage, &Prices::new(), None);
        assert_eq!((c.cost_usd, c.source), (None, CostSource::Unknown));
        let reported = Usage {
            cost_usd: Some(0.5),
            ..usage
        };
        assert_eq!(charge(&reported, &p, None).cost_usd, Some(0.5));
    }

    #[test]
    fn bad_prices_are_named() {
        let p: Prices =
            toml::from_str("[m]\ninput_per_mtok = -1.0\noutput_per_mtok = 2.0\n").unwrap();
        assert!(
            validate(&p)
                .unwrap_err()
                .contains("prices.\"m\".input_per_mtok = -1")
        );
        assert!(toml::from_str::<Prices>("[m]\ninput = 1.0\n").is_err());
    }
}

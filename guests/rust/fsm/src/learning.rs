//! little-loops' learning-test registry, as a `type: learning` state reads it:
//! a record per target in `.ll/learning-tests/<slug>.md` (YAML frontmatter),
//! and the `learning_tests` settings of `ll-config.json` that decide when a
//! proven record has gone stale. Pure functions over text; the machine reads
//! the files through its world (`machine/learning.rs`).
//!
//! The reference is little-loops 1.156.0: `learning_tests/__init__.py`
//! (`check_learning_test`, `read_record`, `LearnTestRecord.from_dict`),
//! `issue_parser.py` (`slugify`), `learning_tests/gate.py` (`is_record_stale`)
//! and `config/core.py` (`BRConfig._load_config`, `deep_merge`).

use serde_json::{Map, Value};

/// Where the records live, relative to the workspace.
pub const REGISTRY_DIR: &str = ".ll/learning-tests";

/// The config files `BRConfig` reads, first found wins (`resolve_config_path`,
/// without the agent-host variants `LL_HOOK_HOST` selects).
pub const CONFIG_FILES: &[&str] = &[".ll/ll-config.json", "ll-config.json"];
/// Frontmatter laid over the config (`LOCAL_OVERRIDE_FILENAME`).
pub const LOCAL_OVERRIDE: &str = ".ll/ll.local.md";

/// The host's words for a workspace file that is not there
/// (`caps/workspace.rs`, `io_message`): only that is a missing record; any
/// other read error (not granted, not text, too large) is reported.
pub fn is_missing(read_error: &str) -> bool {
    read_error.ends_with("does not exist in the workspace")
}

/// `slugify`: drop what is not a word character, whitespace or `-`; runs of
/// `-` and whitespace become one `-`; trim `-`; lower case. Python's `\w` is
/// Unicode letters, digits and `_`.
pub fn slugify(text: &str) -> String {
    let kept: String = text
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '_' || *c == '-' || c.is_whitespace())
        .collect();
    let mut out = String::with_capacity(kept.len());
    let mut in_run = false;
    for c in kept.chars() {
        if c == '-' || c.is_whitespace() {
            if !in_run {
                out.push('-');
            }
            in_run = true;
        } else {
            out.push(c);
            in_run = false;
        }
    }
    out.trim_matches('-').to_lowercase()
}

/// The record file of `target`, relative to the workspace.
pub fn record_path(target: &str) -> String {
    format!("{REGISTRY_DIR}/{}.md", slugify(target))
}

/// What a record says, as far as a learning state looks.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// `status` when it is text (`proven` when absent). Only `stale` and
    /// `refuted` mean anything else than proven, as in little-loops.
    pub status: Option<String>,
    /// The record's `date` as days since 1970-01-01, when little-loops can
    /// read it as an ISO date (a quoted `YYYY-MM-DD` or `YYYYMMDD`; PyYAML
    /// turns an unquoted date into a date object, which `fromisoformat`
    /// refuses, so such a record never ages).
    pub day: Option<i64>,
}

impl Record {
    pub fn is(&self, status: &str) -> bool {
        self.status.as_deref() == Some(status)
    }
}

/// Python's universal newlines, as `Path.read_text` reads a file.
fn universal_newlines(text: &str) -> String {
    text.replace("\r\n", "\n").replace('\r', "\n")
}

/// `read_record` on a file's text: `Ok(None)` when it has no frontmatter
/// (`^---\n(.*?)\n---`), which little-loops treats as no record; `Err` where
/// little-loops raises (unparsable YAML, not a mapping, no `target` or `date`).
pub fn parse_record(text: &str) -> Result<Option<Record>, String> {
    let text = universal_newlines(text);
    let Some(rest) = text.strip_prefix("---\n") else {
        return Ok(None);
    };
    let Some(end) = rest.find("\n---") else {
        return Ok(None);
    };
    let front = &rest[..end];
    use crate::yaml::Value as Y;
    let node = crate::yaml::parse(front).map_err(|e| format!("line {}: {}", e.line, e.message))?;
    // `yaml.safe_load(...) or {}`: an empty document is an empty mapping.
    let empty = match &node.value {
        Y::Null | Y::Bool(false) | Y::Int(0) => true,
        Y::Float(f) => *f == 0.0,
        Y::Str(s) => s.is_empty(),
        Y::Seq(items) => items.is_empty(),
        _ => false,
    };
    let entries: &[(crate::yaml::Key, crate::yaml::Node)] = match node.as_map() {
        Some(e) => e,
        None if empty => &[],
        None => return Err("its frontmatter is not a mapping".into()),
    };
    let get = |name: &str| entries.iter().find(|(k, _)| k.name == name).map(|(_, v)| v);
    if get("target").is_none() {
        return Err("its frontmatter has no `target`".into());
    }
    let Some(date) = get("date") else {
        return Err("its frontmatter has no `date`".into());
    };
    let status = match get("status") {
        None => Some("proven".to_string()),
        Some(n) => n.as_str().map(str::to_string),
    };
    let day = match &date.value {
        crate::yaml::Value::Str(s) if !yaml11_timestamp(front, date.line, s) => iso_day(s),
        _ => None,
    };
    Ok(Some(Record { status, day }))
}

/// Whether PyYAML (YAML 1.1) reads the scalar `value` on line `line` of
/// `front` as a timestamp: written unquoted and matching its timestamp
/// pattern. loopbox's YAML 1.2 reader keeps it as text.
fn yaml11_timestamp(front: &str, line: u32, value: &str) -> bool {
    let written = front
        .lines()
        .nth(line.saturating_sub(1) as usize)
        .unwrap_or("");
    let quoted =
        written.contains(&format!("'{value}'")) || written.contains(&format!("\"{value}\""));
    if quoted {
        return false;
    }
    // PyYAML's `Resolver` pattern for tag:yaml.org,2002:timestamp.
    let re = regex_lite::Regex::new(
        r"^(?:[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]|[0-9][0-9][0-9][0-9]-[0-9][0-9]?-[0-9][0-9]?(?:[Tt]|[ \t]+)[0-9][0-9]?:[0-9][0-9]:[0-9][0-9](?:\.[0-9]*)?(?:[ \t]*(?:Z|[-+][0-9][0-9]?(?::[0-9][0-9])?))?)$",
    )
    .expect("a valid pattern");
    re.is_match(value)
}

/// `datetime.date.fromisoformat` for the calendar forms (`YYYY-MM-DD`,
/// `YYYYMMDD`), as days since 1970-01-01; `None` for anything else.
pub fn iso_day(s: &str) -> Option<i64> {
    let digits = |t: &str| {
        t.bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| t.parse::<i64>().ok())
            .flatten()
    };
    let (y, m, d) = match s.len() {
        10 if s.as_bytes()[4] == b'-' && s.as_bytes()[7] == b'-' => {
            (digits(&s[0..4])?, digits(&s[5..7])?, digits(&s[8..10])?)
        }
        8 if s.is_ascii() => (digits(&s[0..4])?, digits(&s[4..6])?, digits(&s[6..8])?),
        _ => return None,
    };
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let days_in = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    if !(1..=9999).contains(&y) || !(1..=12).contains(&m) || d < 1 || d > days_in[(m - 1) as usize]
    {
        return None;
    }
    // Howard Hinnant's days_from_civil.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    Some(era * 146_097 + doe - 719_468)
}

/// The `learning_tests` settings a learning state uses.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// `enabled` (Python truthiness): staleness is checked only when set.
    pub enabled: bool,
    /// `stale_after_days` as written (default 30); read when a record is checked.
    pub stale_after_days: Value,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            enabled: false,
            stale_after_days: Value::from(30),
        }
    }
}

impl Settings {
    /// `max(1, stale_after_days)`; `Err` where Python's `max` raises.
    pub fn threshold_days(&self) -> Result<f64, String> {
        let n = match &self.stale_after_days {
            Value::Bool(b) => f64::from(u8::from(*b)),
            Value::Number(n) => n.as_f64().unwrap_or(f64::MAX),
            other => {
                return Err(format!(
                    "learning_tests.stale_after_days is {other}, not a number"
                ));
            }
        };
        Ok(n.max(1.0))
    }
}

/// Python's truth of a JSON value.
fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

/// `deep_merge`: mappings merge, anything else replaces, `null` removes.
fn deep_merge(base: &mut Map<String, Value>, over: &Map<String, Value>) {
    for (k, v) in over {
        match (v, base.get_mut(k)) {
            (Value::Null, _) => {
                base.remove(k);
            }
            (Value::Object(o), Some(Value::Object(b))) => deep_merge(b, o),
            _ => {
                base.insert(k.clone(), v.clone());
            }
        }
    }
}

/// `parse_local_override_frontmatter`: `{}` for anything malformed.
fn local_override(text: &str) -> Map<String, Value> {
    let text = universal_newlines(text);
    if !text.starts_with("---") {
        return Map::new();
    }
    let parts: Vec<&str> = text.splitn(3, "---").collect();
    if parts.len() < 3 || parts[1].trim().is_empty() {
        return Map::new();
    }
    match crate::yaml::parse(parts[1].trim()).map(|n| n.to_json()) {
        Ok(Value::Object(m)) => m,
        _ => Map::new(),
    }
}

/// The settings from the config file's text and the local override's. `Err`
/// where `BRConfig` raises (the JSON does not parse, or is not an object, or
/// `learning_tests` is not one): little-loops then leaves staleness off.
pub fn settings(config: Option<&str>, local: Option<&str>) -> Result<Settings, String> {
    let mut raw = match config {
        None => Map::new(),
        Some(text) => match serde_json::from_str::<Value>(&universal_newlines(text)) {
            Ok(Value::Object(m)) => m,
            Ok(_) => return Err("the config is not a JSON object".into()),
            Err(e) => return Err(format!("the config is not JSON: {e}")),
        },
    };
    if let Some(local) = local {
        deep_merge(&mut raw, &local_override(local));
    }
    let lt = match raw.get("learning_tests") {
        None => return Ok(Settings::default()),
        Some(Value::Object(m)) => m,
        Some(_) => return Err("`learning_tests` is not a mapping".into()),
    };
    Ok(Settings {
        enabled: lt.get("enabled").is_some_and(truthy),
        stale_after_days: lt
            .get("stale_after_days")
            .cloned()
            .unwrap_or(Value::from(30)),
    })
}

/// `is_record_stale` on the age path: older than the threshold, in days
/// (`today` is days since 1970-01-01). A date little-loops cannot read never
/// ages.
pub fn is_stale(record: &Record, threshold_days: f64, today: i64) -> bool {
    if record.is("stale") {
        return true;
    }
    record
        .day
        .is_some_and(|day| (today - day) as f64 > threshold_days)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugify_matches_little_loops() {
        assert_eq!(
            slugify("Anthropic SDK streaming"),
            "anthropic-sdk-streaming"
        );
        assert_eq!(
            slugify("  requests.Session / retries!  "),
            "requestssession-retries"
        );
        assert_eq!(slugify("--a_b -- c--"), "a_b-c");
        assert_eq!(slugify("../../etc/passwd"), "etcpasswd");
        assert_eq!(slugify("Ünïcode Wörds"), "ünïcode-wörds");
        assert_eq!(
            record_path("Python pathlib"),
            ".ll/learning-tests/python-pathlib.md"
        );
    }

    #[test]
    fn records_read_as_little_loops_reads_them() {
        let r = parse_record("---\ntarget: x\ndate: '2026-01-02'\nstatus: refuted\n---\nbody\n")
            .unwrap()
            .unwrap();
        assert!(r.is("refuted"));
        assert_eq!(r.day, iso_day("2026-01-02"));
        // No status: proven. CRLF files read the same.
        let r = parse_record("---\r\ntarget: x\r\ndate: \"20260102\"\r\n---\r\n")
            .unwrap()
            .unwrap();
        assert!(r.is("proven"));
        assert_eq!(r.day, iso_day("2026-01-02"));
        // An unquoted date is a date object to PyYAML: it never ages.
        let r = parse_record("---\ntarget: x\ndate: 2026-01-02\n---\n")
            .unwrap()
            .unwrap();
        assert_eq!(r.day, None);
        // No frontmatter: no record.
        assert_eq!(parse_record("target: x\n").unwrap(), None);
        assert_eq!(parse_record("---\ntarget: x\n").unwrap(), None);
        // little-loops raises on these.
        assert!(
            parse_record("---\ndate: '2026-01-02'\n---\n")
                .unwrap_err()
                .contains("target")
        );
        assert!(
            parse_record("---\ntarget: x\n---\n")
                .unwrap_err()
                .contains("date")
        );
        assert!(parse_record("---\n\n---\n").unwrap_err().contains("target"));
        assert!(parse_record("---\n- a\n---\n").is_err());
    }

    #[test]
    fn iso_days_count_from_the_epoch() {
        assert_eq!(iso_day("1970-01-01"), Some(0));
        assert_eq!(iso_day("2000-03-01"), Some(11_017));
        assert_eq!(iso_day("2024-02-29"), Some(19_782));
        assert_eq!(iso_day("2023-02-29"), None);
        assert_eq!(iso_day("2026-1-02"), None);
        assert_eq!(iso_day("2026-01-02T00:00"), None);
    }

    #[test]
    fn settings_merge_the_local_override_and_stay_off_by_default() {
        assert_eq!(settings(None, None).unwrap(), Settings::default());
        let on = r#"{"learning_tests": {"enabled": true, "stale_after_days": 7}}"#;
        let s = settings(Some(on), None).unwrap();
        assert!(s.enabled);
        assert_eq!(s.threshold_days().unwrap(), 7.0);
        let off = "---\nlearning_tests:\n  enabled: null\n---\n";
        assert!(!settings(Some(on), Some(off)).unwrap().enabled);
        let zero = "---\nlearning_tests:\n  stale_after_days: 0\n---\n";
        assert_eq!(
            settings(Some(on), Some(zero))
                .unwrap()
                .threshold_days()
                .unwrap(),
            1.0
        );
        assert!(settings(Some("[1]"), None).is_err());
        assert!(settings(Some("{"), None).is_err());
        let text = r#"{"learning_tests": {"enabled": 1, "stale_after_days": "30"}}"#;
        assert!(
            settings(Some(text), None)
                .unwrap()
                .threshold_days()
                .is_err()
        );
    }

    #[test]
    fn staleness_is_age_past_the_threshold() {
        let day = iso_day("2026-01-01").unwrap();
        let r = Record {
            status: Some("proven".into()),
            day: Some(day),
        };
        assert!(!is_stale(&r, 30.0, day + 30));
        assert!(is_stale(&r, 30.0, day + 31));
        let undated = Record {
            day: None,
            ..r.clone()
        };
        assert!(!is_stale(&undated, 1.0, day + 10_000));
        let marked = Record {
            status: Some("stale".into()),
            ..undated
        };
        assert!(is_stale(&marked, 30.0, 0));
    }
}

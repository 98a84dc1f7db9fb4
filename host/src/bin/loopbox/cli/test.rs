//! `loopbox test [FILE|DIR]...`: run scenario files (`*.scenario.yaml`)
//! against the policies they name, with the world replaced by each scenario
//! (see `loopbox::scenario`). A line per scenario, the first difference of a
//! failing one under it, a summary; `--json` for scripts and `--junit FILE`
//! for CI. Exit 0 when every scenario passes, 1 when one fails, 2 when one
//! cannot be run (the file, its policy or its config) or none is found.

use std::path::{Path, PathBuf};

use clap::Args;
use serde_json::json;

use super::{Failure, exit};
use loopbox::scenario::{self, Outcome, Verdict};
use loopbox::ui::{Untrusted, one_line};

#[derive(Debug, Args)]
pub struct TestArgs {
    /// Scenario files, or directories searched for *.scenario.yaml (default: the workspace)
    paths: Vec<PathBuf>,
    /// Test this policy instead of the one each scenario names (a component, builtin:NAME or a YAML loop)
    #[arg(long, value_name = "POLICY")]
    policy: Option<String>,
    /// Print the results as one JSON object on stdout
    #[arg(long)]
    pub(super) json: bool,
    /// Also write the results as JUnit XML to FILE, for CI
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
}

pub fn execute(args: TestArgs, workspace: &Path) -> Result<i32, Failure> {
    let roots = if args.paths.is_empty() {
        vec![workspace.to_path_buf()]
    } else {
        args.paths.clone()
    };
    let mut files = Vec::new();
    for root in &roots {
        files.extend(scenario::find(root).map_err(Failure::usage)?);
    }
    if files.is_empty() {
        return Err(Failure::usage(anyhow::anyhow!(
            "no scenario files (*{}) under {}; write one (docs/authoring/testing.md) or export a run with `loopbox runs export ID --scenario`",
            scenario::SUFFIX,
            roots
                .iter()
                .map(|r| format!("`{}`", r.display()))
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    // Only the engine's defaults: a scenario's own `config` holds its limits.
    let config =
        loopbox::config::Config::parse("", Path::new("loopbox.toml")).map_err(Failure::internal)?;
    let runtime = super::runtime(&config, workspace)?;
    let tokio = super::tokio()?;
    let mut outcomes = Vec::new();
    for file in &files {
        let o = tokio.block_on(scenario::run_file(file, &runtime, args.policy.as_deref()));
        if !args.json {
            print_line(&o);
        }
        outcomes.push(o);
    }
    let count = |f: fn(&Verdict) -> bool| outcomes.iter().filter(|o| f(&o.verdict)).count();
    let passed = count(|v| matches!(v, Verdict::Pass));
    let failed = count(|v| matches!(v, Verdict::Fail { .. }));
    let errors = count(|v| matches!(v, Verdict::Error(_)));
    if let Some(path) = &args.junit {
        write_replacing(path, &junit(&outcomes)).map_err(|e| {
            Failure::usage(anyhow::anyhow!(
                "cannot write the JUnit report to `{}`: {e:#}; check that its directory exists and is writable",
                path.display()
            ))
        })?;
    }
    if args.json {
        let rows: Vec<_> = outcomes.iter().map(outcome_json).collect();
        loopbox::outln!(
            "{}",
            json!({"scenarios": rows, "passed": passed, "failed": failed, "errors": errors})
        );
    } else {
        loopbox::outln!(
            "{} scenario(s): {passed} passed, {failed} failed, {errors} could not run",
            outcomes.len()
        );
    }
    Ok(if errors > 0 {
        exit::USAGE
    } else if failed > 0 {
        exit::FAILURE
    } else {
        exit::OK
    })
}

/// Writes `text` to a temporary file beside `path` and renames it over
/// `path`: the rename replaces a symlink at `path` itself, so a report path
/// planted as a link (`report.xml -> ~/.bashrc`) never writes through it.
fn write_replacing(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let mut tmp = tempfile::Builder::new()
        .prefix(".loopbox-junit-")
        .tempfile_in(dir)?;
    tmp.write_all(text.as_bytes())?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

fn print_line(o: &Outcome) {
    // The path comes from the scenario's file name, which may hold any byte.
    let file = one_line(&o.file.display().to_string());
    let name = one_line(&o.name);
    match &o.verdict {
        Verdict::Pass => loopbox::outln!("ok    {name} ({file})"),
        Verdict::Fail { line, message } => {
            loopbox::outln!("FAIL  {name} ({file})");
            loopbox::outln!("  {file}:{line}: {}", Untrusted(message));
        }
        Verdict::Error(message) => {
            loopbox::outln!("ERROR {name} ({file})");
            loopbox::outln!("  {}", Untrusted(message));
        }
    }
}

fn outcome_json(o: &Outcome) -> serde_json::Value {
    let (status, line, message) = match &o.verdict {
        Verdict::Pass => ("ok", None, None),
        Verdict::Fail { line, message } => ("fail", Some(*line), Some(message.as_str())),
        Verdict::Error(m) => ("error", None, Some(m.as_str())),
    };
    json!({
        "name": o.name, "file": o.file.display().to_string(), "status": status,
        "line": line, "message": message, "events": o.events,
    })
}

/// The results as JUnit XML: one suite, a test case per scenario.
fn junit(outcomes: &[Outcome]) -> String {
    let failures = outcomes
        .iter()
        .filter(|o| matches!(o.verdict, Verdict::Fail { .. }))
        .count();
    let errors = outcomes
        .iter()
        .filter(|o| matches!(o.verdict, Verdict::Error(_)))
        .count();
    let mut x = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let counts = format!(
        "tests=\"{}\" failures=\"{failures}\" errors=\"{errors}\"",
        outcomes.len()
    );
    x.push_str(&format!("<testsuites name=\"loopbox test\" {counts}>\n"));
    x.push_str(&format!("  <testsuite name=\"loopbox test\" {counts}>\n"));
    for o in outcomes {
        let file = o.file.display().to_string();
        let open = format!(
            "    <testcase name=\"{}\" classname=\"{}\" file=\"{}\"",
            attr(&o.name),
            attr(&file),
            attr(&file)
        );
        match &o.verdict {
            Verdict::Pass => x.push_str(&format!("{open}/>\n")),
            Verdict::Fail { line, message } => x.push_str(&format!(
                "{open}>\n      <failure message=\"{}\">{}:{line}: {}</failure>\n    </testcase>\n",
                attr(message.lines().next().unwrap_or_default()),
                xml(&file),
                xml(message)
            )),
            Verdict::Error(message) => x.push_str(&format!(
                "{open}>\n      <error message=\"{}\">{}</error>\n    </testcase>\n",
                attr(message.lines().next().unwrap_or_default()),
                xml(message)
            )),
        }
    }
    x.push_str("  </testsuite>\n</testsuites>\n");
    x
}

/// Text for an XML attribute: as [`xml`], and tabs and line breaks as
/// character references, since a parser turns raw ones in an attribute into
/// spaces (and a name with a newline would read as two).
fn attr(s: &str) -> String {
    xml(s)
        .replace('\n', "&#10;")
        .replace('\r', "&#13;")
        .replace('\t', "&#9;")
}

/// Text for an XML attribute or element: escaped, and without the control
/// characters XML 1.0 cannot hold (a policy's output may carry any).
fn xml(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => {
                out.push_str(&format!("\\u{{{:x}}}", c as u32))
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xml_text_is_escaped_and_control_characters_are_shown() {
        assert_eq!(
            xml("a<b>&\"'\u{1b}\n"),
            "a&lt;b&gt;&amp;&quot;&apos;\\u{1b}\n"
        );
    }

    #[test]
    fn junit_attributes_keep_line_breaks_and_tabs_as_references() {
        let x = junit(&[Outcome {
            name: "a\nb\rc\td".into(),
            file: PathBuf::from("x\n.scenario.yaml"),
            verdict: Verdict::Error("first\tline".into()),
            events: 0,
        }]);
        assert!(
            x.contains("<testcase name=\"a&#10;b&#13;c&#9;d\" classname=\"x&#10;.scenario.yaml\""),
            "{x}"
        );
        assert!(x.contains("<error message=\"first&#9;line\">"), "{x}");
    }

    #[test]
    fn junit_counts_and_marks_each_case() {
        let o = |name: &str, verdict| Outcome {
            name: name.into(),
            file: PathBuf::from("a.scenario.yaml"),
            verdict,
            events: 1,
        };
        let x = junit(&[
            o("good", Verdict::Pass),
            o(
                "bad",
                Verdict::Fail {
                    line: 4,
                    message: "the decision differs".into(),
                },
            ),
            o("broken", Verdict::Error("no policy".into())),
        ]);
        assert!(
            x.contains("<testsuite name=\"loopbox test\" tests=\"3\" failures=\"1\" errors=\"1\">"),
            "{x}"
        );
        assert!(
            x.contains(
                "<testcase name=\"good\" classname=\"a.scenario.yaml\" file=\"a.scenario.yaml\"/>"
            ),
            "{x}"
        );
        assert!(x.contains("<failure message=\"the decision differs\">a.scenario.yaml:4: the decision differs</failure>"), "{x}");
        assert!(
            x.contains("<error message=\"no policy\">no policy</error>"),
            "{x}"
        );
    }
}

#!/usr/bin/env python3
"""Real little-loops loops, end to end in both tools with one scripted agent.

    tests/conformance/real.py record /work/ll-venv/bin/ll-loop   # writes real.json
    tests/conformance/real.py fetch DIR        # the 1.167.0 wheel's loops/ into DIR (cached)
    tests/conformance/real.py prepare NAME CORPUS WORK   # NAME's scratch project in WORK
    tests/conformance/real.py loopbox target/debug/loopbox [NAME...]   # try loops, compare
    tests/conformance/real.py compare NAME WORK   # WORK's prompts and files against NAME's record

`LOOPS` below names each corpus loop (little-loops 1.167.0's own
`loops/*.yaml`, fetched from PyPI at test time and never copied into this
repository) with the project it runs in: files, the input, and the script of
the stand-in agent (`real/agent`, little-loops' `claude` and loopbox's
`[agent]`). `record` runs each with `ll-loop run` and writes the states it
entered, how it ended, every prompt the agent was given and the project's
files into `real.json`; `host/tests/it/conformance/real.rs` prepares the same
projects, runs `loopbox run` and compares them all (`PROMPT_ALIKE` names the
differences by design evened out first).
"""

import json
import os
import re
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile

HERE = pathlib.Path(__file__).resolve().parent
VERSION = "1.167.0"
# The same PATH for both tools' commands (loopbox's default `shell.path`).
PATH = "/usr/local/bin:/usr/bin:/bin"

# name -> {"input": TEXT, "context": {KEY: VALUE}, "files": {PATH: TEXT}, "agent": [rules],
#          "loopbox_refuses": TEXT (a loop refused by design: the reason loopbox gives)}
LOOPS: dict[str, dict] = {}


def loop(name: str, **spec) -> None:
    LOOPS[name] = spec


# Design tokens given to both tools, for the loops whose prompts carry them:
# without them little-loops 1.167 renders its packaged "default" profile
# (`design_tokens.py`, ENH-3441), which loopbox does not ship (it injects "").
TOKENS = {"design_tokens_context": "**Design tokens**: ink #1d1d1f (text), paper #fafaf7 (background), accent #0a7cff (links)"}


# --- the loops ------------------------------------------------------------

loop("rl-bandit")
loop("adopt-third-party-api")
loop("agent-eval-improve")
# The second round's best variant converges.
loop(
    "apo-beam",
    context={"prompt_file": "prompt.md", "eval_criteria": "clarity"},
    files={"prompt.md": "Summarize the text.\n"},
    agent=[{"when": "Extract the best variant", "reply": ["Variant two.\nCONTINUE", "Variant three.\nCONVERGED"]}],
)
loop("assumption-firewall")
loop("auto-refine-and-implement")
loop("backlog-flow-optimizer")
loop("context-health-monitor")
# An item scores low, is fixed and passes; `IMBALANCED` passes the distribution
# check too (`output_contains` searches: BALANCED is in it); the judge agrees.
loop(
    "dataset-curation",
    agent=[
        {"when": "Quality-gate the next unprocessed item", "reply": ["Format: 40.\n40", "Format: 90.\n90"]},
        {"when": "Analyze the current distribution", "reply": ["Two gaps.\nIMBALANCED", "No gaps.\nBALANCED"]},
    ],
)
loop("dead-code-cleanup")
loop("docs-sync")
loop("eval-driven-development")
loop("evaluation-quality")
loop("examples-miner")
# The judge says lint is dirty once; the tests fail until the agent fixes them.
loop(
    "fix-quality-and-tests",
    files={
        ".ll/ll-config.json": '{"project": {"test_cmd": "sh test.sh"}}\n',
        "test.sh": "echo '1 failed'; exit 1\n",
    },
    agent=[
        {"when": "Did ALL three checks", "judge": True, "reply": ["no", "yes"]},
        {"when": "ll-test-results.txt", "sh": "echo 'echo 3 passed' > test.sh", "reply": "Fixed the test."},
    ],
)
loop("harness-optimize")
loop("harness-plan-research-implement-report")
# The agent's edit is progress for `diff_stall`; the tests pass; the judge agrees.
loop(
    "harness-single-shot",
    files={".ll/ll-config.json": '{"project": {"test_cmd": "true"}}\n', "app.py": "x = 1\n"},
    agent=[{"when": "implement the next open feature", "sh": "echo 'y = 2' >> app.py", "reply": "Added y."}],
)
loop("hitl-md", context=TOKENS)
# The first step fails its tests and is reverted (`git checkout -- .`); the
# second passes, is committed through the agent, and the judge calls it done.
loop(
    "incremental-refactor",
    context={"refactor_goal": "rename x to value", "test_cmd": "sh test.sh"},
    files={
        "app.py": "x = 1\n",
        "test.sh": "if [ -f .tested ]; then echo ok; else touch .tested; echo FAIL; exit 1; fi\n",
    },
    agent=[
        {"when": "Execute the next incomplete refactoring step",
         "sh": "seq $(wc -l < .conformance/calls.log) >> app.py", "reply": "Step done."},
        {"when": "Are all planned refactoring steps complete", "judge": True, "reply": "yes"},
    ],
)
loop("issue-discovery-triage")
loop("issue-refinement")
loop("issue-staleness-review")
loop("learning-tests-audit")
# `execute` says `agent: loop-specialist`: little-loops passes `--agent loop-specialist`
# to claude, loopbox prompts `[agents.loop-specialist]` (LOOPBOX_TOML), whose args do the same.
loop("loop-specialist-eval")
loop("migrate-sdk-version", files_differ="its actions import little_loops with $LL_PYTHON, little-loops' own interpreter; under loopbox the import fails and the loop takes the same route without the files")
loop("outer-loop-eval")
loop("policy-refine")
loop("prompt-regression-test")
loop("proof-first-task")
# Its `score` action runs `claude -p` itself: little-loops' PATH has the stand-in
# agent as `claude`, loopbox's `shell.path` has no `claude`; the path is the same.
loop("rl-coding-agent", prompts_differ="its score action calls `claude` from the shell")
loop("rl-rlhf")
loop("rlhf-svg-refine")
loop("rn-plan-apo")
loop("scan-and-implement")
loop("sft-corpus", files_differ="its actions import little_loops with $LL_PYTHON, little-loops' own interpreter; under loopbox the import fails and the loop takes the same route without the files")
loop("spike-gate")
loop("test-coverage-improvement")
loop("adversarial-redesign", input="a CLI that renames files")
loop("brainstorm", input="names for a tea shop")
loop("generative-art", input="slow blue waves", context=TOKENS)
loop("rubric-refine", input="docs/guide.md")
loop("canvas-sketch-generator", input="a spinning square", context=TOKENS)
loop("openscad-model-generator", input="a small cube")
loop("apply-research", input="notes.md")
loop("prompt-across-issues", input="Summarize the issue")
loop("svg-textgrad", input="a red circle", context=TOKENS)
loop("pixi-data-viz", input="bars of five numbers", context=TOKENS)
loop("pixi-generative-art", input="falling dots", context=TOKENS)
loop("p5js-sketch-generator", input="a bouncing ball", context=TOKENS)
loop("loop-composer", input="demo")
loop("loop-router", input="demo")
loop("loop-composer-adaptive", input="demo")
loop("cua-agent-desktop", input="demo")
loop("flux-image-generator", input="demo")
loop("hitl-compare", input="demo", context=TOKENS)
loop("html-anything", input="demo", context=TOKENS)
loop("html-website-generator", input="demo", context=TOKENS)
loop("refine-to-ready-issue", input="demo")
loop("rn-build", input="demo")
loop("rn-stepwise", input="demo")
loop("sprint-build-and-validate", input="demo")
loop("general-task", input="demo")
loop("recursive-refine", input="demo")
# Its `check_mcp` state calls `playwright/screenshot`: no MCP server is configured
# (no `.mcp.json` for little-loops, no `[mcp.servers.playwright]` for loopbox), so
# both route `not_found` to the next gate, as the loop's comment intends.
loop("harness-multi-item", input="demo")
# `maintain: true`, `backoff: 300`: both run it with `--delay 0.2` (ll-loop's own
# flag, and loopbox run's), so 50 steps of restarts take seconds, not hours.
loop("worktree-health", delay=0.2)
# The code-run-gate oracle under `tamper_guard: fail` and `prepatch_check: fail`.
loop("rn-implement", input="demo")
loop("rn-remediate", context={"issue_id": "BUG-1"})
# The oracle both reach only through `ll-auto` (rn-remediate's run_code_gate),
# run on its own: its states under `tamper_guard: fail` and `prepatch_check: fail`.
loop(
    "oracles/code-run-gate",
    context={"issue_id": "BUG-1", "run_dir": ".loops/runs/gate"},
    # 1.167's prepatch_check writes its evidence to RUN_DIR/prepatch_evidence_ID.json
    # (and little-loops' history db); loopbox's check is 1.156's, which writes none.
    files_differ="1.167's prepatch evidence file (loopbox follows 1.156's prepatch_check)",
    files={".ll/ll-config.json": '{"project": {"test_cmd": "true", "build_cmd": "true"}}\n'},
)

# New in 1.167.0.
loop("continue-task", input="demo")
loop("fleet-loop-improve", input="demo")
loop("human-approval-example", input="demo")
loop("mechanize-skills", input="demo")
loop("stepwise-task", input="demo")

# Both branches of every judged state: each loop whose judge is asked is run
# again as NAME@no-first, where each question's first answer is "no" and
# later ones "yes" (`per_prompt`), so the `on_no` side is walked as well as
# the `on_yes` side a plain "yes" takes.
NO_FIRST = {"when": "", "judge": True, "reply": ["no", "yes"], "per_prompt": True}
for _name in ["adopt-third-party-api", "agent-eval-improve", "fix-quality-and-tests",
              "harness-plan-research-implement-report", "harness-single-shot", "hitl-md",
              "loop-specialist-eval", "openscad-model-generator", "loop-composer", "loop-router",
              "hitl-compare", "html-anything", "html-website-generator", "rn-implement", "rn-remediate"]:
    LOOPS[f"{_name}@no-first"] = {**LOOPS[_name], "agent": LOOPS[_name].get("agent", []) + [NO_FIRST]}


def loop_file(name: str) -> str:
    """The corpus loop a suite entry runs (`NAME@variant` runs NAME)."""
    return name.split("@")[0]

# These take little-loops' path too (`real.py loopbox BIN NAME` tries one) and are
# left out only to keep the suite under a minute: rl-policy,
# interactive-component-generator, rlhf-animated-svg, rlhf-svg-generate,
# apo-textgrad, apo-opro, apo-feedback-refinement, apo-contrastive,
# cli-anything-bootstrap, deep-research, workflow-generator, vega-viz, rn-plan,
# svg-image-generator.
# Not here: prepare-issue (internal to autodev, which seeds its context; run
# alone, ll-loop exits 1 before its first state and loopbox refuses it, exit 2,
# for the missing `readiness_threshold`).
# Not here: rlhf-svg-evaluate run alone has an empty `run_dir`, so its smoke
# counter lives at `/.smoke_count` (ll-loop writes it there; the sandbox does
# not) and its path depends on earlier runs.


# --- machinery ------------------------------------------------------------

def fetch(dest: pathlib.Path) -> pathlib.Path:
    """The wheel's `loops/` directory under `dest` (downloaded once)."""
    loops = dest / "loops"
    if (dest / "complete").exists():
        return loops
    with tempfile.TemporaryDirectory() as tmp:
        got = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
             "--disable-pip-version-check", "--dest", tmp, f"little-loops=={VERSION}"],
            capture_output=True, text=True,
        )
        if got.returncode != 0:
            # Exit 3 tells the test PyPI could not be reached: it skips, saying so.
            print(f"cannot fetch little-loops {VERSION} from PyPI with pip: {got.stderr.strip()[-600:]}")
            sys.exit(3)
        wheel = next(pathlib.Path(tmp).glob("*.whl"))
        if loops.exists():
            shutil.rmtree(loops)
        with zipfile.ZipFile(wheel) as z:
            for name in z.namelist():
                if not name.startswith("little_loops/loops/") or "/." in name:
                    continue  # run records shipped by mistake (.history/, .running/)
                if not name.endswith(".yaml"):
                    continue
                target = dest / name.removeprefix("little_loops/")
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(z.read(name))
    (dest / "complete").write_text(VERSION)
    return loops


LOOPBOX_TOML = """[shell]
scripts = true
allow = [["git", "diff"], ["git", "hash-object"], ["git", "ls-files"], ["git", "merge-base"], ["git", "show"], ["sha256sum"]]

[agent]
command = ["./.conformance/agent", "{prompt}"]
output = "text"

[agents.loop-specialist]
args = ["--agent", "loop-specialist"]

[worktree]
allow = true

# No one answers: a human_approval state takes its timeout route at once, as
# little-loops' does when its stdin is not a terminal ("headless").
[confirm]
unattended = "decline"
"""


def input_key(corpus: pathlib.Path | None, name: str) -> str:
    """The context key a loop's positional input fills (its `input_key`)."""
    path = corpus / f"{name}.yaml" if corpus else None
    if path and path.exists():
        m = re.search(r"(?m)^input_key:\s*([\w-]+)", path.read_text())
        if m:
            return m.group(1)
    return "input"


def loopbox_input(spec: dict, key: str = "input") -> list[str]:
    """`--input` for loopbox: the context as a JSON object (the text input
    under the loop's `input_key`), else the text; and `--delay`, as
    little-loops is given it."""
    delay = ["--delay", str(spec["delay"])] if "delay" in spec else []
    if spec.get("context"):
        ctx = dict(spec["context"])
        if "input" in spec:
            ctx[key] = spec["input"]
        return ["--input", json.dumps(ctx)] + delay
    return (["--input", spec["input"]] if "input" in spec else []) + delay


def prepare(name: str, corpus: pathlib.Path, work: pathlib.Path, spec: dict | None = None) -> None:
    """A scratch git project for `name`: the corpus in `.loops/`, the spec's
    files, the agent and its script in `.conformance/`, and loopbox.toml."""
    spec = LOOPS[name] if spec is None else spec
    shutil.copytree(corpus, work / ".loops", dirs_exist_ok=True)
    for rel, text in spec.get("files", {}).items():
        p = work / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    conf = work / ".conformance"
    conf.mkdir(exist_ok=True)
    shutil.copy(HERE / "real" / "agent", conf / "agent")
    (conf / "script.json").write_text(json.dumps(spec.get("agent", [])))
    # What `loopbox validate --grants` asks of these loops (ll-loop reads no such file).
    (work / "loopbox.toml").write_text(LOOPBOX_TOML)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]
    subprocess.run(git + ["init", "-q"], cwd=work, check=True)
    (work / ".git" / "info" / "exclude").write_text(".conformance/\n.loops/\n.loopbox/\nloopbox.toml\nbin/\n")
    subprocess.run(git + ["add", "-A"], cwd=work, check=True)
    subprocess.run(git + ["commit", "-q", "--allow-empty", "-m", "start"], cwd=work, check=True)


# What neither tool's comparison looks at: each tool's own records and the harness's.
NOT_COMPARED = {".git", ".loops", ".conformance", ".loopbox", "bin", "loopbox.toml"}


def observed(work: pathlib.Path) -> dict:
    """What a run left behind, for comparing the two tools: every prompt the
    agent was given (in order, whole), and each file of the project (its
    SHA-256), but for the tools' own records."""
    import hashlib
    log = work / ".conformance" / "prompts.jsonl"
    prompts = [json.loads(l) for l in log.read_text().splitlines()] if log.exists() else []
    files = {}
    for p in sorted(work.rglob("*")):
        rel = p.relative_to(work)
        # A run's own directory is compared under one name (little-loops names
        # it LOOP-TIMESTAMP, loopbox by the run's id); the rest of `.loops/` is
        # the corpus and each tool's records.
        if rel.parts[:2] == (".loops", "runs") and len(rel.parts) > 3:
            rel = pathlib.PurePosixPath(".loops/runs/<run>", *rel.parts[3:])
        elif rel.parts[0] in NOT_COMPARED:
            continue
        if p.is_dir() or FILES_NOT_COMPARED.search(rel.as_posix()):
            continue
        if p.is_symlink():
            files[rel.as_posix()] = "link:" + os.readlink(p)
            continue
        data = p.read_bytes()
        try:
            data = alike(data.decode(), FILE_ALIKE).encode()
        except UnicodeDecodeError:
            pass
        files[rel.as_posix()] = hashlib.sha256(data).hexdigest()[:16]
    return {"prompts": prompts, "files": files}


def alike(text: str, rules) -> str:
    for pattern, repl in rules:
        text = pattern.sub(repl, text)
    return text


def record_one(ll_loop: str, name: str, corpus: pathlib.Path) -> dict:
    spec = LOOPS[name]
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp)
        prepare(name, corpus, work)
        (work / "bin").mkdir()
        (work / "bin" / "claude").symlink_to(work / ".conformance" / "agent")
        argv = [ll_loop, "run", loop_file(name)]
        if "input" in spec:
            argv.append(spec["input"])
        for k, v in spec.get("context", {}).items():
            argv += ["--context", f"{k}={v}"]
        if "delay" in spec:
            argv += ["--delay", str(spec["delay"])]
        argv += ["--no-lock", "--quiet"]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("LL_", "CLAUDE"))}
        env["PATH"] = f"{work / 'bin'}:{PATH}"
        env["LL_HOST_CLI"] = "claude-code"
        # Its own session: little-loops kills its process group at an MCP timeout.
        done = subprocess.run(argv, cwd=work, capture_output=True, text=True, timeout=int(os.environ.get("REAL_TIMEOUT", "600")), env=env,
                              start_new_session=True)
        events = sorted((work / ".loops" / ".history").glob("*/events.jsonl"))
        events = [e for e in events if e.parent.name.endswith(f"-{loop_file(name)}")] or events
        path, ending = [], {}
        if events:
            for line in events[0].read_text().splitlines():
                if not line.strip():
                    continue
                e = json.loads(line)
                if e.get("depth"):
                    continue
                if e["event"] == "state_enter":
                    path.append(e["state"])
                elif e["event"] == "loop_complete":
                    ending = e
        if ending.get("terminated_by") == "terminal":
            path.append(ending["final_state"])
        calls = (work / ".conformance" / "calls.log")
        return {
            "loop": name,
            "spec": spec,
            "loopbox_args": loopbox_input(spec, input_key(corpus, loop_file(name))),
            "path": path,
            "terminated_by": ending.get("terminated_by", "refused"),
            "exit_code": done.returncode,
            "agent_calls": len(calls.read_text().splitlines()) if calls.exists() else 0,
            "stderr_tail": done.stderr[-400:] if not events else "",
            **observed(work),
        }


def loopbox_one(loopbox: str, name: str, corpus: pathlib.Path) -> dict:
    """What the Rust test does, for trying a loop out: run it with loopbox."""
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp) / "w"
        work.mkdir()
        prepare(name, corpus, work)
        env = dict(os.environ, XDG_DATA_HOME=str(pathlib.Path(tmp) / "data"))
        subprocess.run([loopbox, "trust", "loopbox.toml"], cwd=work, env=env, capture_output=True, check=True)
        argv = [loopbox, "run", f".loops/{loop_file(name)}.yaml", "--json", "--little-loops", VERSION] + \
            loopbox_input(LOOPS[name], input_key(corpus, loop_file(name)))
        done = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        try:
            data = json.loads(done.stdout)["outcome"]["data"]
        except Exception:
            data = {}
        calls = work / ".conformance" / "calls.log"
        return {"loop": name, "path": data.get("path", []), "terminated_by": data.get("terminated_by", "refused"),
                "exit_code": done.returncode, "agent_calls": len(calls.read_text().splitlines()) if calls.exists() else 0,
                "stderr_tail": done.stderr[-600:], **observed(work)}


# Where the two tools differ by design, made alike before comparing:
PROMPT_ALIKE = [
    # How a shell action is run, as its error messages name it: little-loops
    # writes it to a script, loopbox gives it to `bash -c`.
    (re.compile(r"(?m)^(?:/tmp/ll-action-\w+\.sh|/usr/bin/bash|bash): line "), "<shell>: line "),
    # The project's scratch directory, and a run's directory under it
    # (little-loops names it LOOP-TIMESTAMP, loopbox by the run's id).
    (re.compile(r"/tmp/[^/\s]+(?:/w)?/\.loops/runs/[^/\s]+/"), "<work>/.loops/runs/<run>/"),
    (re.compile(r"/tmp/[^/\s]+(?:/w)?(?=/|\b)"), "<work>"),
    # A judge's prompt: little-loops asks claude for a verdict with
    # `--json-schema`; loopbox's agent is any program, so it asks in words.
    (re.compile(r"\n\nReply with only a JSON object: \{\"verdict\".*\Z", re.S), ""),
]
# What a file's text holds that differs by design: the prompts' rules, and a
# time or a commit's id (a commit made a second later has another).
FILE_ALIKE = PROMPT_ALIKE + [
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?"), "<time>"),
    (re.compile(r"\b[0-9a-f]{40}\b"), "<sha>"),
]
# The tools' own records in the project: little-loops' run history, the state
# files of its `diff_stall` (loopbox keeps that count in the run's journal),
# and the checkpoint it salvages at `max_steps` (`best_effort.json`, ENH-3473).
FILES_NOT_COMPARED = re.compile(r"^\.ll/history\.db|/ll-diff-stall-[^/]*$|^\.loops/runs/<run>/best_effort\.json$")


def comparable(kind: str, v, spec: dict | None = None):
    """A record's prompts or files as they are compared (PROMPT_ALIKE); a
    spec's `prompts_differ` or `files_differ` (the reason) leaves them out."""
    if (spec or {}).get(f"{kind}_differ"):
        return None
    if kind == "files":
        return {k: h for k, h in (v or {}).items() if not FILES_NOT_COMPARED.match(k)}
    out = []
    for p in v or []:
        out.append({"judge": p["judge"], "prompt": alike(p["prompt"], PROMPT_ALIKE)})
    return out


def differences(want: dict, got: dict) -> list[str]:
    """How a loopbox run's prompts and files differ from the record's."""
    spec = want.get("spec", {})
    return [f"{k} differ: {describe(comparable(k, want.get(k), spec), comparable(k, got[k], spec))}"
            for k in ("prompts", "files")
            if comparable(k, want.get(k), spec) != comparable(k, got[k], spec)]


def describe(want, got) -> str:
    """The first difference between little-loops' record and loopbox's."""
    if isinstance(want, dict) and isinstance(got, dict):
        keys = sorted(set(want) | set(got))
        return "; ".join(f"{k}: {want.get(k)} vs {got.get(k)}" for k in keys if want.get(k) != got.get(k))[:600]
    want, got = want or [], got or []
    for i, (a, b) in enumerate(zip(want, got)):
        if a != b:
            a, b = a["prompt"], b["prompt"]
            j = next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            return f"prompt {i}: at char {j}: {a[max(0, j - 60):j + 120]!r} vs {b[max(0, j - 60):j + 120]!r}"
    return f"{len(want)} prompts vs {len(got)}"


def main() -> int:
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "fetch":
        print(fetch(pathlib.Path(sys.argv[2])))
    elif cmd == "prepare":
        # The project as recorded: the spec stored in real.json.
        name = sys.argv[2]
        recorded = {t["loop"]: t for t in json.loads((HERE / "real.json").read_text())["traces"]}
        prepare(name, pathlib.Path(sys.argv[3]), pathlib.Path(sys.argv[4]), recorded[name]["spec"])
    elif cmd == "compare":
        # After the Rust test's `loopbox run` in WORK: its prompts and files
        # against the record's; exit 1 naming each difference.
        name, work = sys.argv[2], pathlib.Path(sys.argv[3])
        recorded = {t["loop"]: t for t in json.loads((HERE / "real.json").read_text())["traces"]}
        found = differences(recorded[name], observed(work))
        print("\n".join(found))
        return 1 if found else 0
    elif cmd == "spec":
        print(json.dumps(LOOPS[sys.argv[2]]))
    elif cmd == "loopbox":
        loopbox = str(pathlib.Path(sys.argv[2]).resolve())
        want = {t["loop"]: t for t in json.loads((HERE / "real.json").read_text())["traces"]}
        with tempfile.TemporaryDirectory() as tmp:
            corpus = fetch(pathlib.Path(tmp))
            for name in sys.argv[3:] or LOOPS:
                began = time.monotonic()
                t = loopbox_one(loopbox, name, corpus)
                t["stderr_tail"] = f"{time.monotonic() - began:.1f} s\n" + t["stderr_tail"]
                w = want.get(name, {})
                same = all(w.get(k) == t[k] for k in ("path", "terminated_by", "exit_code"))
                differ = [f"   {d}" for d in differences(w, t)]
                same = same and not differ
                print(f"{t['stderr_tail'].splitlines()[0]:>7} ", end="")
                print(f"{'same' if same else 'DIFF'} {name:32} exit {t['exit_code']:3} {t['terminated_by']:12} calls {t['agent_calls']:2} {' > '.join(t['path'])}", flush=True)
                for d in differ:
                    print(d)
                if not same:
                    print(f"   little-loops: exit {w.get('exit_code')} {w.get('terminated_by')} calls {w.get('agent_calls')} {' > '.join(w.get('path', []))}")
                    print("   " + t["stderr_tail"].replace("\n", "\n   "))
    elif cmd == "record":
        ll_loop = sys.argv[2]
        only = sys.argv[3:]
        with tempfile.TemporaryDirectory() as tmp:
            corpus = fetch(pathlib.Path(tmp))
            out = HERE / "real.json"
            old = {t["loop"]: t for t in json.loads(out.read_text())["traces"]} if out.exists() and only else {}
            traces = []
            for name in LOOPS:
                if only and name not in only:
                    if name in old:
                        traces.append(old[name])
                    continue
                t = record_one(ll_loop, name, corpus)
                traces.append(t)
                print(f"{name:32} exit {t['exit_code']:3} {t['terminated_by']:12} calls {t['agent_calls']:2} {' > '.join(t['path'])} {t['stderr_tail']}", flush=True)
        out.write_text(json.dumps({"little_loops": VERSION, "traces": traces}, indent=2) + "\n")
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Real little-loops loops, end to end in both tools with one scripted agent.

    tests/conformance/real.py record /work/ll-venv/bin/ll-loop   # writes real.json
    tests/conformance/real.py fetch DIR        # the 1.156.0 wheel's loops/ into DIR (cached)
    tests/conformance/real.py prepare NAME CORPUS WORK   # NAME's scratch project in WORK
    tests/conformance/real.py loopbox target/debug/loopbox [NAME...]   # try loops, compare

`LOOPS` below names each corpus loop (little-loops 1.156.0's own
`loops/*.yaml`, fetched from PyPI at test time and never copied into this
repository) with the project it runs in: files, the input, and the script of
the stand-in agent (`real/agent`, little-loops' `claude` and loopbox's
`[agent]`). `record` runs each with `ll-loop run` and writes the states it
entered and how it ended into `real.json`; `host/tests/it/conformance/real.rs`
prepares the same projects, runs `loopbox run` and compares.
"""

import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile

HERE = pathlib.Path(__file__).resolve().parent
VERSION = "1.156.0"
# The same PATH for both tools' commands (loopbox's default `shell.path`).
PATH = "/usr/local/bin:/usr/bin:/bin"

# name -> {"input": TEXT, "context": {KEY: VALUE}, "files": {PATH: TEXT}, "agent": [rules],
#          "loopbox_refuses": TEXT (a loop refused by design: the reason loopbox gives)}
LOOPS: dict[str, dict] = {}


def loop(name: str, **spec) -> None:
    LOOPS[name] = spec


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
loop("hitl-md")
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
loop("migrate-sdk-version")
loop("outer-loop-eval")
loop("policy-refine")
loop("prompt-regression-test")
loop("proof-first-task")
loop("rl-coding-agent")
loop("rl-rlhf")
loop("rlhf-svg-refine")
loop("rn-plan-apo")
loop("scan-and-implement")
loop("sft-corpus")
loop("spike-gate")
loop("test-coverage-improvement")
loop("adversarial-redesign", input="a CLI that renames files")
loop("brainstorm", input="names for a tea shop")
loop("generative-art", input="slow blue waves")
loop("rubric-refine", input="docs/guide.md")
loop("canvas-sketch-generator", input="a spinning square")
loop("openscad-model-generator", input="a small cube")
loop("apply-research", input="notes.md")
loop("prompt-across-issues", input="Summarize the issue")
loop("svg-textgrad", input="a red circle")
loop("pixi-data-viz", input="bars of five numbers")
loop("pixi-generative-art", input="falling dots")
loop("p5js-sketch-generator", input="a bouncing ball")
loop("loop-composer", input="demo")
loop("loop-router", input="demo")
loop("loop-composer-adaptive", input="demo")
loop("cua-agent-desktop", input="demo")
loop("flux-image-generator", input="demo")
loop("hitl-compare", input="demo")
loop("html-anything", input="demo")
loop("html-website-generator", input="demo")
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
    files={".ll/ll-config.json": '{"project": {"test_cmd": "true", "build_cmd": "true"}}\n'},
)


# These take little-loops' path too (`real.py loopbox BIN NAME` tries one) and are
# left out only to keep the suite under a minute: rl-policy,
# interactive-component-generator, rlhf-animated-svg, rlhf-svg-generate,
# apo-textgrad, apo-opro, apo-feedback-refinement, apo-contrastive,
# cli-anything-bootstrap, deep-research, workflow-generator, vega-viz, rn-plan,
# svg-image-generator.
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
allow = [["git", "diff"], ["git", "ls-files"], ["git", "merge-base"], ["git", "show"], ["sha256sum"]]

[agent]
command = ["./.conformance/agent", "{prompt}"]
output = "text"

[agents.loop-specialist]
args = ["--agent", "loop-specialist"]

[worktree]
allow = true
"""


def loopbox_input(spec: dict) -> list[str]:
    """`--input` for loopbox: the context as a JSON object, else the text;
    and `--delay`, as little-loops is given it."""
    delay = ["--delay", str(spec["delay"])] if "delay" in spec else []
    if spec.get("context"):
        ctx = dict(spec["context"])
        if "input" in spec:
            ctx["input"] = spec["input"]
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


def record_one(ll_loop: str, name: str, corpus: pathlib.Path) -> dict:
    spec = LOOPS[name]
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp)
        prepare(name, corpus, work)
        (work / "bin").mkdir()
        (work / "bin" / "claude").symlink_to(work / ".conformance" / "agent")
        argv = [ll_loop, "run", name]
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
        events = [e for e in events if e.parent.name.endswith(f"-{name}")] or events
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
            "loopbox_args": loopbox_input(spec),
            "path": path,
            "terminated_by": ending.get("terminated_by", "refused"),
            "exit_code": done.returncode,
            "agent_calls": len(calls.read_text().splitlines()) if calls.exists() else 0,
            "stderr_tail": done.stderr[-400:] if not events else "",
        }


def loopbox_one(loopbox: str, name: str, corpus: pathlib.Path) -> dict:
    """What the Rust test does, for trying a loop out: run it with loopbox."""
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp) / "w"
        work.mkdir()
        prepare(name, corpus, work)
        env = dict(os.environ, XDG_DATA_HOME=str(pathlib.Path(tmp) / "data"))
        subprocess.run([loopbox, "trust", "loopbox.toml"], cwd=work, env=env, capture_output=True, check=True)
        argv = [loopbox, "run", f".loops/{name}.yaml", "--json"] + loopbox_input(LOOPS[name])
        done = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        try:
            data = json.loads(done.stdout)["outcome"]["data"]
        except Exception:
            data = {}
        calls = work / ".conformance" / "calls.log"
        return {"loop": name, "path": data.get("path", []), "terminated_by": data.get("terminated_by", "refused"),
                "exit_code": done.returncode, "agent_calls": len(calls.read_text().splitlines()) if calls.exists() else 0,
                "stderr_tail": done.stderr[-600:]}


def main() -> int:
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "fetch":
        print(fetch(pathlib.Path(sys.argv[2])))
    elif cmd == "prepare":
        # The project as recorded: the spec stored in real.json.
        name = sys.argv[2]
        recorded = {t["loop"]: t for t in json.loads((HERE / "real.json").read_text())["traces"]}
        prepare(name, pathlib.Path(sys.argv[3]), pathlib.Path(sys.argv[4]), recorded[name]["spec"])
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
                same = w.get("path") == t["path"] and w.get("terminated_by") == t["terminated_by"]
                print(f"{t['stderr_tail'].splitlines()[0]:>7} ", end="")
                print(f"{'same' if same else 'DIFF'} {name:32} exit {t['exit_code']:3} {t['terminated_by']:12} calls {t['agent_calls']:2} {' > '.join(t['path'])}", flush=True)
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

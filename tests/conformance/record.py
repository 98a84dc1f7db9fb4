#!/usr/bin/env python3
"""Record how little-loops runs the conformance loops: the states each run
enters, how it ends and its exit code, into traces.json.

    python3 -m venv /tmp/ll && /tmp/ll/bin/pip install little-loops==1.156.0 pytest
    tests/conformance/record.py /tmp/ll/bin/ll-loop              # every case
    tests/conformance/record.py /tmp/ll/bin/ll-loop CASE.yaml... # these, the rest kept
    tests/conformance/record.py /tmp/ll167/bin/ll-loop --1.167      # NEW_CASES, into traces-1.167.json

Each case runs in a fresh scratch directory holding a copy of loops/, with
`ll-loop run LOOP.yaml [INPUT] --no-llm --no-lock`; the path is read from
the run's events (`state_enter` at the top level, then the terminal state).
The `JUDGED` cases run without --no-llm, with `loops/judge-agent` on PATH as
`claude`: loopbox's conformance test gives it to loopbox as its agent.
Nothing of little-loops is kept: only what it did.
"""

import json
import os
import pathlib
import pty
import shutil
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent

# (loop, input or None)
CASES = [
    ("next-on-error.yaml", None),
    ("check-terminal-action.yaml", None),
    ("failing-exit-evaluator.yaml", None),
    ("error-patterns.yaml", None),
    ("anchors-and-captures.yaml", None),
    ("iteration.yaml", None),
    ("convergence.yaml", None),
    ("route-table.yaml", None),
    ("failed-by-name.yaml", None),
    ("text-input.yaml", "it's a \"test\"; $HOME"),
    ("text-input.yaml", None),
    ("object-input.yaml", '{"target": "given"}'),
    ("object-input.yaml", '{"unknown": 1}'),
    ("step-cap.yaml", None),
    ("on-max-steps.yaml", None),
    ("max-retries.yaml", None),
    ("throttle.yaml", None),
    ("circuit.yaml", None),
    ("fragments.yaml", None),
    ("inherit-child.yaml", None),
    ("sub-loop.yaml", None),
    ("flow.yaml", None),
    ("no-action.yaml", None),
    ("numeric-and-classify.yaml", None),
    ("loop-stop.yaml", None),
    ("fatal-error.yaml", None),
    ("action-timeout.yaml", None),
    ("passthrough.yaml", None),
    ("cycle.yaml", None),
    ("circuit-abort.yaml", None),
    ("shell-bash.yaml", None),
    ("context-missing.yaml", None),
    ("loop-timeout.yaml", None),
    ("timeout-kind.yaml", None),
    ("run-dir.yaml", None),
    ("regex-python.yaml", None),
    ("failure-exit.yaml", None),
    ("route-literal-keys.yaml", None),
    ("unrouted-verdict.yaml", None),
    ("sub-loop-max-steps.yaml", None),
    ("sub-loop-markers.yaml", None),
    ("uncaptured.yaml", None),
    ("judge.yaml", None),
    ("long-run.yaml", None),
    ("tamper-guard-clean.yaml", None),
    ("tamper-guard-edited.yaml", None),
    ("tamper-guard-added.yaml", None),
    ("prepatch-skip.yaml", None),
    ("prepatch-enabled.yaml", None),
    ("prepatch-candidates.yaml", None),
    ("tamper-guard-sub-loop.yaml", None),
    ("learning-proven.yaml", None),
    ("learning-refuted.yaml", None),
    ("learning-explore.yaml", None),
    ("learning-exhausted.yaml", None),
    ("learning-stale.yaml", None),
    ("worktree.yaml", None),
    ("agent-profile.yaml", None),
    ("mcp-tool.yaml", None),
    ("maintain.yaml", None),
    ("tamper-guard-revert.yaml", None),
    ("prepatch-flagged.yaml", None),
    ("prepatch-clean.yaml", None),
]

# Cases of what little-loops 1.167 changed or added (issue 46), recorded with
# 1.167.0 into traces-1.167.json (`--1.167`); traces.json stays 1.156.0's.
NEW_CASES = [
    ("shell-default.yaml", None),
    ("abstain-exit-3.yaml", None),
    ("convergence-reference.yaml", None),
    ("idle-timeout.yaml", None),
    ("human-approval.yaml", None),
    ("diff-stall-untracked.yaml", None),
    ("output-json-python.yaml", None),
    ("regex-anchors.yaml", None),
    ("numeric-python.yaml", None),
    ("prev-no-action.yaml", None),
    ("big-int.yaml", None),
    ("big-int.yaml", '{"given": 123456789012345678901234567891}'),
    ("timeout-backoff.yaml", None),
    ("env-passed.yaml", None),
    ("messages.yaml", None),
]

# `human_approval` cases a person answers at the terminal (1.167, `--1.167`):
# (loop, the lines typed on the run's terminal, a pty). "" types nothing, so
# the state's `timeout` runs out. The trace keeps them as `answer`; loopbox's
# test gives the same verdicts at its terminal, with `loopbox runs
# approve|deny|answer` and over the server's API.
ANSWERED = [
    ("human-approval-answered.yaml", "y\n"),
    ("human-approval-answered.yaml", "n too risky\n"),
    ("human-approval-answered.yaml", "e\nretry 4 times\n"),
    ("human-approval-unanswered.yaml", ""),
]

# Cases whose repository has a commit and the branch `wt-feat` (`worktree:`
# checks it out); loopbox's test makes the same (`common::branch_fixture`).
BRANCHED = {"worktree.yaml"}

# Cases that call the MCP server `probe` (`loops/mcp-server.py`), which
# little-loops finds in `.mcp.json` and loopbox's test in `[mcp.servers.probe]`.
MCP = {"mcp-tool.yaml"}

# Cases run with the venv's own bin first on PATH: its `mcp-call` (the MCP
# states' runner) and its `python` with pytest (the pre-patch check runs
# `python -m pytest`); loopbox's test puts a Python with pytest on shell.path.
VENV_PATH = MCP | {"prepatch-flagged.yaml", "prepatch-clean.yaml"}

# Cases whose repository holds `fixtures/<loop>/`, committed on `main` before
# the run (loopbox's test makes the same commit: `common::fixture_commit`).
FIXTURES = HERE / "fixtures"

# Cases whose `llm_structured` judge is the scripted `loops/judge-agent`:
# little-loops runs it as `claude` (found on PATH), without --no-llm.
JUDGED = {"judge.yaml", "long-run.yaml", "agent-profile.yaml"}
# Learning states send `/ll:explore-api TARGET` to the agent: `loops/judge-agent`
# answers it too (writing the record kept in `loops/learning/explored/`).
JUDGED |= {c for c, _ in CASES if c.startswith("learning-")}


def run(ll_loop: str, loop: str, given: str | None, answer: str | None = None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp)
        # Loops live in .loops/, where ll-loop looks for the sub-loops they name.
        shutil.copytree(HERE / "loops", work / ".loops")
        subprocess.run(["git", "init", "-q"], cwd=work, check=True)
        git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
        if loop in BRANCHED:
            subprocess.run(git + ["commit", "-q", "--allow-empty", "-m", "base"], cwd=work, check=True)
            subprocess.run(git + ["branch", "wt-feat"], cwd=work, check=True)
        fixture = FIXTURES / loop.removesuffix(".yaml")
        if fixture.is_dir():
            shutil.copytree(fixture, work, dirs_exist_ok=True)
            subprocess.run(["git", "symbolic-ref", "HEAD", "refs/heads/main"], cwd=work, check=True)
            names = [p.name for p in fixture.iterdir()]
            subprocess.run(git + ["add", "--"] + names, cwd=work, check=True)
            subprocess.run(git + ["commit", "-q", "-m", "base"], cwd=work, check=True)
        if loop in MCP:
            servers = {"probe": {"command": "python3", "args": [".loops/mcp-server.py"]}}
            (work / ".mcp.json").write_text(json.dumps({"mcpServers": servers}))
        argv = [ll_loop, "run", loop.removesuffix(".yaml")]
        if given is not None:
            argv.append(given)
        env = dict(os.environ)
        if loop in VENV_PATH:
            env["PATH"] = f"{pathlib.Path(ll_loop).parent}:{env['PATH']}"
        if loop in JUDGED:
            (work / "bin").mkdir()
            (work / "bin" / "claude").symlink_to(work / ".loops" / "judge-agent")
            env["PATH"] = f"{work / 'bin'}:{env['PATH']}"
            env["LL_HOST_CLI"] = "claude-code"
        else:
            argv.append("--no-llm")
        argv += ["--no-lock", "--quiet"]
        # Its own session: little-loops kills its process group at an MCP timeout.
        # No terminal on stdin: a `human_approval` state has no operator to ask;
        # an ANSWERED case gets a terminal (a pty) with its answer typed on it.
        if answer is None:
            done = subprocess.run(argv, cwd=work, capture_output=True, text=True, timeout=300,
                                  env=env, start_new_session=True, stdin=subprocess.DEVNULL)
        else:
            master, slave = pty.openpty()
            os.write(master, answer.encode())
            done = subprocess.run(argv, cwd=work, capture_output=True, text=True, timeout=300,
                                  env=env, start_new_session=True, stdin=slave)
            os.close(slave)
            os.close(master)
        events = sorted((work / ".loops" / ".history").glob("*/events.jsonl"))
        events = [e for e in events if f"-{loop.removesuffix('.yaml')}" in e.parent.name] or events
        path, ending = [], {}
        if events:
            # The top-level run is the one whose loop_start came first.
            lines = [json.loads(l) for l in events[0].read_text().splitlines() if l.strip()]
            for e in lines:
                if e.get("depth"):
                    continue
                if e["event"] == "state_enter":
                    path.append(e["state"])
                elif e["event"] == "loop_complete":
                    ending = e
        if ending.get("terminated_by") == "terminal":
            path.append(ending["final_state"])
        trace = {
            "loop": loop,
            "input": given,
            "path": path,
            "terminated_by": ending.get("terminated_by", "refused"),
            "exit_code": done.returncode,
        }
        if answer is not None:
            trace["answer"] = answer
        return trace


def main() -> None:
    ll_loop = sys.argv[1] if len(sys.argv) > 1 else "ll-loop"
    version = subprocess.run(
        [str(pathlib.Path(ll_loop).with_name("python")), "-c",
         "import importlib.metadata as m; print(m.version('little-loops'))"],
        capture_output=True, text=True,
    ).stdout.strip() or "unknown"
    only = set(sys.argv[2:])
    cases, file = CASES, HERE / "traces.json"
    if "--1.167" in only:
        only.discard("--1.167")
        cases, file = NEW_CASES, HERE / "traces-1.167.json"
    answered = ANSWERED if file.name == "traces-1.167.json" else []
    kept = {}
    if only:
        old = json.loads(file.read_text())
        kept = {(t["loop"], t["input"], t.get("answer")): t for t in old["traces"]}
    traces = [
        run(ll_loop, loop, given, answer)
        if not only or loop in only or (loop, given, answer) not in kept
        else kept[(loop, given, answer)]
        for loop, given, answer in [(l, g, None) for l, g in cases] + [(l, None, a) for l, a in answered]
    ]
    out = {"little_loops": version, "traces": traces}
    file.write_text(json.dumps(out, indent=2) + "\n")
    for t in traces:
        print(f"{t['loop']:32} exit {t['exit_code']:3} {t['terminated_by']:10} {' > '.join(t['path'])}")


if __name__ == "__main__":
    main()

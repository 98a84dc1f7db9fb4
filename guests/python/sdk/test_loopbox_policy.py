"""Unit tests of loopbox_policy, run natively: `python3 -m unittest` in this directory.

The SDK runs on the real generated bindings (componentize-py writes them from
wit/ into a temporary directory: their types are the ones a component gets);
only the host's functions, which natively raise NotImplementedError, are
replaced by a recording fake (`FakeHost`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import unittest
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple
from unittest import mock

HERE = Path(__file__).resolve().parent
_bindings_dir: Optional[tempfile.TemporaryDirectory[str]] = None


def _wit() -> Path:
    if os.environ.get("LOOPBOX_WIT"):
        return Path(os.environ["LOOPBOX_WIT"])
    for parent in HERE.parents:
        if (parent / "wit" / "policy.wit").is_file():
            return parent / "wit"
    raise RuntimeError("cannot find wit/policy.wit above %s; set LOOPBOX_WIT to loopbox's wit/ directory" % HERE)


def _componentize_py() -> str:
    found = shutil.which("componentize-py")
    if found:
        return found
    candidate = Path(sysconfig.get_path("scripts")) / "componentize-py"
    if candidate.is_file():
        return str(candidate)
    raise RuntimeError(
        "these tests run on the bindings componentize-py generates; install it with:\n"
        "    python3 -m pip install componentize-py==0.25.1"
    )


def setUpModule() -> None:
    global _bindings_dir
    _bindings_dir = tempfile.TemporaryDirectory(prefix="loopbox-policy-bindings-")
    subprocess.run(
        [_componentize_py(), "-d", str(_wit()), "-w", "loop-policy", "bindings", _bindings_dir.name],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    sys.path.insert(0, _bindings_dir.name)
    sys.path.insert(0, str(HERE))


def tearDownModule() -> None:
    if _bindings_dir is not None:
        sys.path.remove(_bindings_dir.name)
        _bindings_dir.cleanup()


class FakeHost:
    """The host's side of the imports: state in a dict, every call recorded, and
    `shell`/`prompt` answering with `answer` (an Output, or an ActionError_* to raise)."""

    def __init__(self) -> None:
        from componentize_py_types import Err
        from wit_world.imports import actions

        self.Err = Err
        self.state: Dict[str, str] = {}
        self.calls: List[Tuple[str, Any]] = []
        self.answer: Any = actions.Output(
            exit_code=0, stdout="ok\n", stderr="", duration_ms=3, timed_out=False, truncated=False, session=None
        )
        self.state_limit: Optional[str] = None

    def __enter__(self) -> FakeHost:
        from wit_world.imports import actions, log, state, workspace

        self.patches = [
            mock.patch.object(actions, "shell", self._action("shell")),
            mock.patch.object(actions, "prompt", self._action("prompt")),
            mock.patch.object(actions, "worktree_add", self._action("worktree-add")),
            mock.patch.object(actions, "worktree_remove", self._action("worktree-remove")),
            mock.patch.object(state, "get", lambda k: self.state.get(k)),
            mock.patch.object(state, "set", self._set),
            mock.patch.object(state, "remove", lambda k: self.state.pop(k, None) and None),
            mock.patch.object(state, "keys", lambda p: sorted(k for k in self.state if k.startswith(p))),
            mock.patch.object(log, "write", lambda level, m: self.calls.append(("log", (level.name, m)))),
            mock.patch.object(log, "progress", lambda m: self.calls.append(("progress", m))),
            mock.patch.object(workspace, "read", self._read),
            mock.patch.object(workspace, "list_dir", lambda d: ["a.txt", "src/"]),
        ]
        for p in self.patches:
            p.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for p in self.patches:
            p.stop()

    def _action(self, name: str) -> Callable[[Any], Any]:
        def call(request: Any) -> Any:
            self.calls.append((name, request))
            if type(self.answer).__name__.startswith("ActionError_"):
                raise self.Err(self.answer)
            return self.answer

        return call

    def _set(self, key: str, value: str) -> None:
        if self.state_limit:
            raise self.Err(self.state_limit)
        self.state[key] = value

    def _read(self, path: str) -> str:
        if path == "secret":
            raise self.Err("`secret` is withheld by shell.hide")
        return "text of " + path


class BuildTests(unittest.TestCase):
    def test_the_sdk_names_the_contract_version_of_wit(self) -> None:
        import re

        import loopbox_policy

        package = re.search(r"^package loopbox:policy@([^;\s]+);", (_wit() / "policy.wit").read_text(), re.M)
        assert package is not None
        self.assertEqual(loopbox_policy.CONTRACT, package.group(1), "update CONTRACT and check the SDK against the new contract")

    def test_importing_the_sdk_imports_every_binding_module_it_calls(self) -> None:
        # componentize-py snapshots the interpreter after importing app.py; a
        # component has no files, so a binding module first imported inside a
        # handler fails there with "cannot import name 'state'".
        code = (
            "import sys, loopbox_policy\n"
            "need = ['wit_world.imports.%s' % m for m in ('types', 'state', 'log', 'actions', 'workspace')]\n"
            "need += ['wit_world.exports.policy', 'componentize_py_types']\n"
            "print(sorted(n for n in need if n not in sys.modules))\n"
        )
        assert _bindings_dir is not None
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), _bindings_dir.name]))
        out = subprocess.run([sys.executable, "-B", "-c", code], env=env, capture_output=True, text=True, check=True)
        self.assertEqual(out.stdout.strip(), "[]", out.stderr)


class ExecTests(unittest.TestCase):
    def test_exec_builds_the_command_the_host_receives(self) -> None:
        from loopbox_policy import exec
        from wit_world.imports import actions

        with FakeHost() as host:
            base = exec(["make", "test"])
            out = base.cwd("web").env("CI", "1").stdin("y\n").timeout_ms(60_000).run()
            base.run()
        self.assertEqual(out.stdout, "ok\n")
        self.assertEqual(
            host.calls[0],
            ("shell", actions.ShellRequest_Exec(actions.Command(argv=["make", "test"], cwd="web", env=[("CI", "1")], stdin="y\n", timeout_ms=60_000))),
        )
        # The builder's methods return new builders: `base` ran as it was built.
        self.assertEqual(
            host.calls[1],
            ("shell", actions.ShellRequest_Exec(actions.Command(argv=["make", "test"], cwd=None, env=[], stdin=None, timeout_ms=None))),
        )

    def test_exec_refuses_a_string_and_values_the_host_could_not_take(self) -> None:
        from loopbox_policy import exec

        with self.assertRaisesRegex(TypeError, "not one string.*script"):
            exec("make test")  # type: ignore[arg-type]
        with self.assertRaisesRegex(TypeError, "non-empty list of strings"):
            exec([])
        with self.assertRaisesRegex(TypeError, "non-empty list of strings"):
            exec(["make", 3])  # type: ignore[list-item]
        for bad in (-1, 2**64, 1.5, True):
            with self.assertRaisesRegex(ValueError, "timeout_ms"):
                exec(["true"]).timeout_ms(bad)  # type: ignore[arg-type]

    def test_script_and_prompts(self) -> None:
        from loopbox_policy import prompt, script, slash_command, worktree_add, worktree_remove
        from wit_world.imports import actions

        with FakeHost() as host:
            script("make test | tail -5", timeout_ms=1000)
            prompt("Fix it").model("m").session("s1").timeout_ms(5).send()
            slash_command("/review").send()
            prompt("Eval", profile="specialist").cwd("wt").send()
            worktree_add("feature")
            worktree_remove("wt")
        self.assertEqual(host.calls[0], ("shell", actions.ShellRequest_Script(actions.Script(source="make test | tail -5", cwd=None, timeout_ms=1000))))
        self.assertEqual(
            host.calls[1],
            (
                "prompt",
                actions.PromptRequest(
                    text="Fix it", kind=actions.PromptKind.PROMPT, model="m", session="s1", timeout_ms=5, profile=None, cwd=None
                ),
            ),
        )
        self.assertEqual(host.calls[2][1].kind, actions.PromptKind.SLASH_COMMAND)
        self.assertEqual((host.calls[3][1].profile, host.calls[3][1].cwd), ("specialist", "wt"))
        self.assertEqual(host.calls[4:], [("worktree-add", "feature"), ("worktree-remove", "wt")])
        with self.assertRaises(TypeError):
            prompt("x").profile(3)  # type: ignore[arg-type]

    def test_every_action_error_kind_becomes_its_exception(self) -> None:
        import loopbox_policy as lp
        from wit_world.imports import actions

        cases = [
            (actions.ActionError_Denied("no rule allows [\"make\"]; add it to shell.allow"), lp.Denied, "denied"),
            (actions.ActionError_Declined("the user said no"), lp.Declined, "declined"),
            (actions.ActionError_BudgetExhausted("limits.actions_per_run (100)"), lp.BudgetExhausted, "budget-exhausted"),
            (actions.ActionError_Invalid("empty argv"), lp.Invalid, "invalid"),
            (actions.ActionError_Unavailable("no agent"), lp.Unavailable, "unavailable"),
            (actions.ActionError_OutcomeUnknown(), lp.OutcomeUnknown, "outcome-unknown"),
        ]
        for value, cls, kind in cases:
            with FakeHost() as host:
                host.answer = value
                with self.assertRaises(cls) as caught:
                    lp.exec(["make"]).run()
                with self.assertRaises(cls):
                    lp.prompt("hi").send()
            e = caught.exception
            self.assertIsInstance(e, lp.ActionError)
            self.assertIsInstance(e, lp.PolicyError)
            self.assertEqual(e.kind, kind)
            self.assertEqual(e.message, getattr(value, "value", ""))
            self.assertTrue(e.describe().startswith(kind.replace("-", " ")), e.describe())
        self.assertEqual(str(lp.Denied("add it to shell.allow")), "denied: add it to shell.allow")

    def test_an_action_in_a_decider_build_says_which_world_to_use(self) -> None:
        import wit_world.imports as imports
        from loopbox_policy import PolicyError, exec, prompt, script, workspace

        # A component built for `decider` has no actions or workspace module.
        with mock.patch.dict(sys.modules, {"wit_world.imports.actions": None, "wit_world.imports.workspace": None}):
            saved = {n: imports.__dict__.pop(n) for n in ("actions", "workspace") if n in imports.__dict__}
            try:
                for attempt in (lambda: exec(["make"]).run(), lambda: script("ls"), lambda: prompt("x").send()):
                    with self.assertRaisesRegex(PolicyError, 'decider.*world = "loop-policy"'):
                        attempt()
                with self.assertRaisesRegex(PolicyError, "decider.*reads no files"):
                    workspace.read("a")
            finally:
                imports.__dict__.update(saved)


class StateTests(unittest.TestCase):
    def test_values_round_trip_as_json(self) -> None:
        from loopbox_policy import state

        with FakeHost() as host:
            state.set("progress", {"config": {"prompt": "p"}, "iteration": 1})
            state.set("n", 3)
            self.assertEqual(host.state["progress"], '{"config": {"prompt": "p"}, "iteration": 1}')
            self.assertEqual(state.get("progress", dict), {"config": {"prompt": "p"}, "iteration": 1})
            self.assertEqual(state.get("n"), 3)
            self.assertEqual(state.get("n", int), 3)
            self.assertEqual(state.get("n", float), 3.0)
            self.assertIsNone(state.get("missing", int))
            self.assertEqual(state.get("missing", int, 0), 0)
            self.assertEqual(state.keys(), ["n", "progress"])
            self.assertEqual(state.keys("p"), ["progress"])
            state.remove("n")
            self.assertIsNone(state.get("n"))

    def test_a_value_of_another_shape_is_a_policy_error_naming_the_key(self) -> None:
        from loopbox_policy import PolicyError, state

        with FakeHost() as host:
            host.state["tries"] = '"three"'
            host.state["flag"] = "true"
            with self.assertRaisesRegex(PolicyError, "state `tries` is not the expected shape: expected int, found str"):
                state.get("tries", int)
            # bool is an int to Python, not to JSON.
            with self.assertRaisesRegex(PolicyError, "expected int, found bool"):
                state.get("flag", int)
            with self.assertRaisesRegex(PolicyError, "state `x` is not JSON"):
                state.set("x", {"a": object()})  # type: ignore[dict-item]
            with self.assertRaisesRegex(PolicyError, "is not JSON"):
                state.set("x", float("nan"))
            self.assertNotIn("x", host.state)

    def test_the_hosts_limit_message_reaches_the_policy(self) -> None:
        from loopbox_policy import PolicyError, state

        with FakeHost() as host:
            host.state_limit = "state value of 70000 bytes is over limits.state_value_bytes (65536)"
            with self.assertRaisesRegex(PolicyError, r"limits\.state_value_bytes"):
                state.set("big", "x" * 70000)


class LogAndWorkspaceTests(unittest.TestCase):
    def test_log_levels_and_progress(self) -> None:
        from loopbox_policy import log

        with FakeHost() as host:
            log.debug("d")
            log.info("i")
            log.warn("w")
            log.error("e")
            log.progress("step 2/3")
        self.assertEqual(
            host.calls,
            [("log", ("DEBUG", "d")), ("log", ("INFO", "i")), ("log", ("WARN", "w")), ("log", ("ERROR", "e")), ("progress", "step 2/3")],
        )

    def test_workspace_reads_and_refusals(self) -> None:
        from loopbox_policy import WorkspaceError, workspace

        with FakeHost():
            self.assertEqual(workspace.read("README.md"), "text of README.md")
            self.assertEqual(workspace.list_dir(), ["a.txt", "src/"])
            with self.assertRaisesRegex(WorkspaceError, "withheld by shell.hide"):
                workspace.read("secret")


class DecisionTests(unittest.TestCase):
    def test_each_decision_is_the_contracts(self) -> None:
        import loopbox_policy as lp
        from wit_world.imports import types

        self.assertEqual(lp.wait(), types.Decision_Pass())
        self.assertEqual(lp.inject("go on"), types.Decision_Inject("go on"))
        self.assertEqual(lp.block("no"), types.Decision_Block("no"))
        self.assertEqual(lp.ask("which?"), types.Decision_Ask("which?"))
        self.assertEqual(lp.escalate("stuck"), types.Decision_Escalate("stuck"))
        self.assertEqual(lp.rewrite({"command": "ls"}), types.Decision_Rewrite('{"command": "ls"}'))
        self.assertEqual(lp.done(True, "green"), types.Decision_Done(types.Outcome(success=True, summary="green", data=None)))
        self.assertEqual(
            lp.done(False, "red", {"tries": 3}),
            types.Decision_Done(types.Outcome(success=False, summary="red", data='{"tries": 3}')),
        )
        with self.assertRaisesRegex(TypeError, "success must be True or False"):
            lp.done(1, "x")  # type: ignore[arg-type]
        with self.assertRaisesRegex(TypeError, "inject.*takes text"):
            lp.inject(None)  # type: ignore[arg-type]
        with self.assertRaisesRegex(TypeError, "not JSON"):
            lp.done(True, "x", float("inf"))


class PolicyTests(unittest.TestCase):
    def events(self) -> List[Any]:
        from wit_world.imports import types

        origin = types.Origin(agent="claude-code", event="Stop", agent_id=None, permission_mode=None, tool=None)
        return [
            types.Event_Start('{"a": 1}'),
            types.Event_TurnComplete(types.Turn(session_id="s", response="r", index=1, continuation=False, origin=origin)),
            types.Event_ToolCall(types.ToolCall(name="Bash", input='{"command": "ls"}', origin=None)),
            types.Event_Tick('{"t": 1}'),
            types.Event_UserInput("yes"),
            types.Event_Custom(("PostToolUse", "{}")),
        ]

    def test_events_are_dispatched_by_kind_and_the_rest_wait(self) -> None:
        import loopbox_policy as lp
        from wit_world.imports import types

        seen: List[Any] = []

        class Policy(lp.Policy):
            name = "p"
            description = "test"

            def on_start(self, input: str) -> lp.Decision:
                seen.append(("start", input))
                return lp.inject("started")

            def on_turn_complete(self, turn: lp.Turn) -> lp.Decision:
                seen.append(("turn", turn.response, turn.origin and turn.origin.agent))
                return lp.done(True, "ok")

            def on_tool_call(self, call: lp.ToolCall) -> lp.Decision:
                seen.append(("tool", call.name))
                return lp.block("no")

            def on_custom(self, name: str, payload: str) -> lp.Decision:
                seen.append(("custom", name, payload))
                return lp.wait()

        decisions = [Policy().handle(e) for e in self.events()]
        self.assertEqual(
            [type(d).__name__ for d in decisions],
            ["Decision_Inject", "Decision_Done", "Decision_Block", "Decision_Pass", "Decision_Pass", "Decision_Pass"],
        )
        self.assertEqual(
            seen,
            [("start", '{"a": 1}'), ("turn", "r", "claude-code"), ("tool", "Bash"), ("custom", "PostToolUse", "{}")],
        )
        info = Policy().info()
        self.assertEqual((info.name, info.version, info.description), ("p", "0.1.0", "test"))
        self.assertEqual(lp.Policy().handle(types.Event_Start("{}")), types.Decision_Pass())

    def test_a_policy_error_fails_the_event_with_its_message(self) -> None:
        import loopbox_policy as lp
        from componentize_py_types import Err

        class Refuses(lp.Policy):
            def on_start(self, input: str) -> lp.Decision:
                raise lp.PolicyError("bad input: `prompt` is empty")

            def on_turn_complete(self, turn: lp.Turn) -> lp.Decision:
                lp.exec(["make", "test"]).run()
                return lp.wait()

        events = self.events()
        with self.assertRaises(Err) as caught:
            Refuses().handle(events[0])
        self.assertEqual(caught.exception.value, "bad input: `prompt` is empty")
        from wit_world.imports import actions

        with FakeHost() as host:
            host.answer = actions.ActionError_Denied("add [\"make\", \"test\"] to shell.allow")
            with self.assertRaises(Err) as caught:
                Refuses().handle(events[1])
        self.assertEqual(caught.exception.value, 'denied: add ["make", "test"] to shell.allow')

    def test_a_handler_that_returns_no_decision_is_named(self) -> None:
        import loopbox_policy as lp
        from componentize_py_types import Err

        class Forgets(lp.Policy):
            def on_start(self, input: str) -> lp.Decision:
                lp.inject("x")  # and forgets to return it
                return None  # type: ignore[return-value]

        with self.assertRaises(Err) as caught:
            Forgets().handle(self.events()[0])
        self.assertIn("the handler of start returned None, not a decision: return wait(), inject(...)", caught.exception.value)

        class Strays(lp.Policy):
            def on_turn_complete(self, turn: lp.Turn) -> lp.Decision:
                return "pass"  # type: ignore[return-value]

        with self.assertRaises(Err) as caught:
            Strays().handle(self.events()[1])
        self.assertIn("the handler of turn-complete returned 'pass', not a decision", caught.exception.value)

    def test_other_exceptions_propagate_for_their_traceback(self) -> None:
        import loopbox_policy as lp

        class Crashes(lp.Policy):
            def on_tick(self, snapshot: str) -> lp.Decision:
                raise KeyError("oops")

        with self.assertRaises(KeyError):
            Crashes().handle(self.events()[3])


if __name__ == "__main__":
    unittest.main()

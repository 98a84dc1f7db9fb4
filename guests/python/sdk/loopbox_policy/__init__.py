"""Write a loopbox loop policy in Python.

A policy is a class named ``Policy`` in ``app.py`` that subclasses
:class:`loopbox_policy.Policy` and overrides the handlers of the events it
cares about; each returns a decision::

    from loopbox_policy import Policy as Base, done, escalate, exec, inject, state, ActionError

    class Policy(Base):
        name = "green-tests"
        description = "Re-run the tests until they pass, three tries at most"

        def on_turn_complete(self, turn):
            tries = state.get("tries", int, 0)
            try:
                out = exec(["make", "test"]).timeout_ms(600_000).run()
            except ActionError as e:          # not granted, declined, ...
                return escalate("cannot run the tests: " + e.describe())
            if out.exit_code == 0:
                return done(True, "the tests pass")
            state.set("tries", tries + 1)
            return inject("The tests fail:\\n" + out.stdout)

Everything a policy does in the world goes through the host, which checks it
against the user's grants: a refusal is an :class:`ActionError` to handle (its
``kind`` says which), never a crash. An uncaught :class:`PolicyError` (an
``ActionError`` included) fails the event with its message.

The SDK targets the contract ``loopbox:policy@0.4.0`` (:data:`CONTRACT`); it is
built into the component by componentize-py with the generated ``wit_world``
bindings. A policy that calls only :mod:`state` and :mod:`log` imports nothing
else and may be built for the ``decider`` world, which needs no grants.
"""

from __future__ import annotations

import json as _json
import re as _re
from typing import TYPE_CHECKING, ClassVar, Dict, List, Optional, Sequence, Tuple

from . import log, state, workspace
from ._errors import (
    ActionError,
    BudgetExhausted,
    Declined,
    Denied,
    Invalid,
    OutcomeUnknown,
    PolicyError,
    Unavailable,
    WorkspaceError,
    action_error,
)
from ._types import JsonValue

if TYPE_CHECKING:
    from wit_world.exports.policy import PolicyInfo
    from wit_world.imports.actions import Output, ShellRequest
    from wit_world.imports.types import Decision, Event, Origin, ToolCall, Turn

__all__ = [
    "CONTRACT",
    "ActionError",
    "BudgetExhausted",
    "Declined",
    "Decision",
    "Denied",
    "Event",
    "Exec",
    "Invalid",
    "JsonValue",
    "Origin",
    "OutcomeUnknown",
    "Output",
    "Policy",
    "PolicyError",
    "Prompt",
    "Snapshot",
    "ToolCall",
    "Turn",
    "Unavailable",
    "WorkspaceError",
    "ask",
    "block",
    "done",
    "escalate",
    "exec",
    "inject",
    "log",
    "mcp_call",
    "prompt",
    "rewrite",
    "script",
    "slash_command",
    "sleep_until",
    "state",
    "wait",
    "workspace",
    "worktree_add",
    "worktree_at",
    "worktree_remove",
]

#: The contract this SDK is written against (``package loopbox:policy@...`` in wit/policy.wit).
CONTRACT = "0.4.0"


def _preload() -> None:
    """Import every binding module the SDK calls, now. componentize-py runs this
    import when it builds the component and keeps the interpreter as it is then;
    the component has no files to import from later, so a module first imported
    inside a handler would not be found. ``actions`` and ``workspace`` exist in
    the ``loop-policy`` world only; natively, without bindings, none do."""
    import importlib

    for name in (
        "componentize_py_types",
        "wit_world.exports.policy",
        "wit_world.imports.types",
        "wit_world.imports.state",
        "wit_world.imports.log",
        "wit_world.imports.actions",
        "wit_world.imports.workspace",
    ):
        try:
            importlib.import_module(name)
        except ImportError:
            pass


_preload()


# --- decisions ---------------------------------------------------------------


def wait() -> Decision:
    """Nothing to add: the agent may stop, the tool call proceeds, the run waits
    for the next event (the contract's ``pass``)."""
    from wit_world.imports import types

    return types.Decision_Pass()


def inject(message: str) -> Decision:
    """Send ``message`` to the agent as its next turn."""
    from wit_world.imports import types

    return types.Decision_Inject(_text("inject", message))


def block(reason: str) -> Decision:
    """Refuse: cancel the tool call or the chain; ``reason`` is shown to the agent."""
    from wit_world.imports import types

    return types.Decision_Block(_text("block", reason))


def rewrite(value: object) -> Decision:
    """Replace the event's payload (a tool call's input) with ``value``, a JSON value."""
    from wit_world.imports import types

    return types.Decision_Rewrite(_dump("rewrite", value))


def ask(question: str) -> Decision:
    """Ask a person; the run pauses until their answer arrives as ``on_user_input``."""
    from wit_world.imports import types

    return types.Decision_Ask(_text("ask", question))


def escalate(reason: str) -> Decision:
    """Hand the run to a person and park it; ``reason`` says why."""
    from wit_world.imports import types

    return types.Decision_Escalate(_text("escalate", reason))


def sleep_until(until_ms: int, payload: object, reason: str) -> Decision:
    """Park the run until ``until_ms`` (milliseconds since the Unix epoch), then
    have it woken with a ``tick`` carrying ``payload`` (any JSON value);
    ``reason`` is shown to the person."""
    from wit_world.imports import types

    if not isinstance(until_ms, int) or isinstance(until_ms, bool) or not 0 <= until_ms < 2**64:
        raise TypeError("sleep_until(until_ms, ...): %r is not a time in milliseconds" % (until_ms,))
    return types.Decision_Sleep(
        types.Timer(until_ms=until_ms, tick=_dump("sleep_until", payload), reason=_text("sleep_until", reason))
    )


def done(success: bool, summary: str, data: object = None) -> Decision:
    """Finish the run with an outcome; ``data`` (any JSON value) is structured
    detail for scripts, left out when ``None``."""
    from wit_world.imports import types

    if not isinstance(success, bool):
        raise TypeError("done(success, summary): success must be True or False, not %r" % (success,))
    encoded = None if data is None else _dump("done", data)
    return types.Decision_Done(types.Outcome(success=success, summary=_text("done", summary), data=encoded))


def _text(what: str, value: object) -> str:
    if not isinstance(value, str):
        raise TypeError("%s(...) takes text, not %s" % (what, type(value).__name__))
    return value


def _dump(what: str, value: object) -> str:
    try:
        return _json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise TypeError("%s(...): the value is not JSON: %s" % (what, e)) from None


# --- actions -----------------------------------------------------------------


def _decider() -> PolicyError:
    """What an action says in a component built for the `decider` world, whose
    bindings have no `actions` module."""
    return PolicyError(
        "this policy is built for the `decider` world, which can run nothing: "
        'set world = "loop-policy" in policy.toml to run commands or prompt the agent'
    )


def _timeout(ms: Optional[int]) -> Optional[int]:
    if ms is not None and (isinstance(ms, bool) or not isinstance(ms, int) or not 0 <= ms < 2**64):
        raise ValueError("timeout_ms must be a whole number of milliseconds, not %r" % (ms,))
    return ms


def _shell(request: ShellRequest) -> Output:
    from componentize_py_types import Err

    try:
        from wit_world.imports import actions
    except ImportError:
        raise _decider() from None
    try:
        out: Output = actions.shell(request)
        return out
    except Err as e:
        raise action_error(e.value) from None


class Exec:
    """A command to run, built up then :meth:`run`: ``exec(["make", "test"]).cwd("web").run()``.

    Each method returns a new ``Exec``; the one it was called on is unchanged."""

    __slots__ = ("_argv", "_cwd", "_env", "_stdin", "_timeout_ms")

    def __init__(
        self,
        argv: Sequence[str],
        cwd: Optional[str] = None,
        env: Sequence[Tuple[str, str]] = (),
        stdin: Optional[str] = None,
        timeout_ms: Optional[int] = None,
    ) -> None:
        if isinstance(argv, (str, bytes)):
            raise TypeError(
                "exec takes the program and its arguments as a list, not one string: "
                "exec([\"make\", \"test\"]); for shell text use script(...)"
            )
        self._argv: List[str] = list(argv)
        if not self._argv or not all(isinstance(a, str) for a in self._argv):
            raise TypeError("exec takes a non-empty list of strings, not %r" % (argv,))
        self._cwd = cwd
        self._env: List[Tuple[str, str]] = list(env)
        self._stdin = stdin
        self._timeout_ms = _timeout(timeout_ms)

    def _with(self, **changes: object) -> Exec:
        fields: Dict[str, object] = {
            "argv": self._argv,
            "cwd": self._cwd,
            "env": self._env,
            "stdin": self._stdin,
            "timeout_ms": self._timeout_ms,
        }
        fields.update(changes)
        return Exec(**fields)  # type: ignore[arg-type]

    def cwd(self, directory: str) -> Exec:
        """Run in ``directory``, relative to the workspace root."""
        return self._with(cwd=_text("cwd", directory))

    def env(self, name: str, value: str) -> Exec:
        """Set a variable (the user must list its name in ``shell.pass_env_from_policy``)."""
        return self._with(env=self._env + [(_text("env", name), _text("env", value))])

    def stdin(self, text: str) -> Exec:
        """Write ``text`` to the program's standard input (closed otherwise)."""
        return self._with(stdin=_text("stdin", text))

    def timeout_ms(self, ms: int) -> Exec:
        """A wall-clock limit; the user's ``shell.max_timeout_ms`` caps it either way."""
        return self._with(timeout_ms=_timeout(ms))

    @property
    def argv(self) -> List[str]:
        return list(self._argv)

    def run(self) -> Output:
        """Run it; raises :class:`ActionError` when the host refuses or cannot run it."""
        try:
            from wit_world.imports import actions
        except ImportError:
            raise _decider() from None
        command = actions.Command(
            argv=list(self._argv),
            cwd=self._cwd,
            env=list(self._env),
            stdin=self._stdin,
            timeout_ms=self._timeout_ms,
        )
        return _shell(actions.ShellRequest_Exec(command))

    def __repr__(self) -> str:
        return "exec(%r)" % (self._argv,)


def exec(argv: Sequence[str]) -> Exec:  # noqa: A001 - the name the docs promise
    """A program with its arguments, executed directly: no shell reads them, so
    nothing in an argument is expanded or split. For shell text, see :func:`script`."""
    return Exec(argv)


def script(source: str, timeout_ms: Optional[int] = None, cwd: Optional[str] = None) -> Output:
    """Shell text run with ``sh -c``; needs the user's ``shell.scripts`` grant."""
    try:
        from wit_world.imports import actions
    except ImportError:
        raise _decider() from None
    request = actions.ShellRequest_Script(
        actions.Script(source=_text("script", source), cwd=cwd, timeout_ms=_timeout(timeout_ms))
    )
    return _shell(request)


class Prompt:
    """A message to the configured agent, built up then :meth:`send`:
    ``prompt("Fix the build").session(s).send()``. Methods return a new ``Prompt``."""

    __slots__ = ("_text", "_slash", "_model", "_session", "_timeout_ms", "_profile", "_cwd")

    def __init__(
        self,
        text: str,
        slash: bool = False,
        model: Optional[str] = None,
        session: Optional[str] = None,
        timeout_ms: Optional[int] = None,
        profile: Optional[str] = None,
        cwd: Optional[str] = None,
    ) -> None:
        self._text = _text("prompt", text)
        self._slash = slash
        self._model = model
        self._session = session
        self._timeout_ms = _timeout(timeout_ms)
        self._profile = None if profile is None else _text("profile", profile)
        self._cwd = None if cwd is None else _text("cwd", cwd)

    def _with(self, **changes: object) -> Prompt:
        fields: Dict[str, object] = {
            "text": self._text,
            "slash": self._slash,
            "model": self._model,
            "session": self._session,
            "timeout_ms": self._timeout_ms,
            "profile": self._profile,
            "cwd": self._cwd,
        }
        fields.update(changes)
        return Prompt(**fields)  # type: ignore[arg-type]

    def model(self, model: str) -> Prompt:
        """A model name, for runners that take one."""
        return self._with(model=_text("model", model))

    def session(self, session: str) -> Prompt:
        """Continue this agent conversation (an earlier ``Output.session``)."""
        return self._with(session=_text("session", session))

    def timeout_ms(self, ms: int) -> Prompt:
        return self._with(timeout_ms=_timeout(ms))

    def profile(self, name: str) -> Prompt:
        """Send it to the user's ``[agents.NAME]`` profile instead of ``[agent]``;
        a name the user did not define is :class:`Denied`."""
        return self._with(profile=_text("profile", name))

    def cwd(self, directory: str) -> Prompt:
        """Run the agent in ``directory``, relative to the workspace root."""
        return self._with(cwd=_text("cwd", directory))

    def send(self) -> Output:
        """Send it and wait for the reply (in ``stdout``); raises :class:`ActionError`."""
        from componentize_py_types import Err

        try:
            from wit_world.imports import actions
        except ImportError:
            raise _decider() from None
        request = actions.PromptRequest(
            text=self._text,
            kind=actions.PromptKind.SLASH_COMMAND if self._slash else actions.PromptKind.PROMPT,
            model=self._model,
            session=self._session,
            timeout_ms=self._timeout_ms,
            profile=self._profile,
            cwd=self._cwd,
        )
        try:
            out: Output = actions.prompt(request)
            return out
        except Err as e:
            raise action_error(e.value) from None


def prompt(text: str, profile: Optional[str] = None) -> Prompt:
    """Plain instructions for the agent (``profile``: the user's ``[agents.NAME]``
    to send them to instead of ``[agent]``)."""
    return Prompt(text, profile=profile)


def slash_command(text: str) -> Prompt:
    """A slash command (``/review``) for the agent, passed as written."""
    return Prompt(text, slash=True)


def worktree_add(branch: str) -> str:
    """Check out ``branch`` in a new git worktree the host makes (the user's
    ``[worktree]`` grant); its path relative to the workspace, for
    ``exec(...).cwd(path)`` and ``prompt(...).cwd(path)``. Raises :class:`ActionError`."""
    from componentize_py_types import Err

    try:
        from wit_world.imports import actions
    except ImportError:
        raise _decider() from None
    try:
        path: str = actions.worktree_add(_text("worktree_add", branch))
        return path
    except Err as e:
        raise action_error(e.value) from None


def worktree_remove(path: str) -> None:
    """Remove a worktree :func:`worktree_add` made in this run. Raises :class:`ActionError`."""
    from componentize_py_types import Err

    try:
        from wit_world.imports import actions
    except ImportError:
        raise _decider() from None
    try:
        actions.worktree_remove(_text("worktree_remove", path))
    except Err as e:
        raise action_error(e.value) from None


def worktree_at(revision: str, copy: Sequence[str] = ()) -> str:
    """Check out ``revision`` in a new detached git worktree the host makes (the
    user's ``[worktree]`` grant), with the workspace files ``copy`` names copied
    in; its path relative to the workspace. Raises :class:`ActionError`."""
    from componentize_py_types import Err

    try:
        from wit_world.imports import actions
    except ImportError:
        raise _decider() from None
    try:
        path: str = actions.worktree_at(_text("worktree_at", revision), [_text("worktree_at", p) for p in copy])
        return path
    except Err as e:
        raise action_error(e.value) from None


def mcp_call(
    server: str, tool: str, arguments: Optional[Dict[str, JsonValue]] = None, timeout_ms: Optional[int] = None
) -> Tuple[str, JsonValue, int]:
    """Call ``tool`` of the MCP server the user's loopbox.toml names ``server``
    (``[mcp.servers.NAME]``): ``(status, answer, duration_ms)``, where status is
    ``ok``, ``tool-error``, ``not-found`` or ``no-answer`` and answer the
    server's result. Raises :class:`ActionError` (a server or tool not granted: :class:`Denied`)."""
    from componentize_py_types import Err

    try:
        from wit_world.imports import actions
    except ImportError:
        raise _decider() from None
    request = actions.McpRequest(
        server=_text("mcp_call", server),
        tool=_text("mcp_call", tool),
        arguments=_dump("mcp_call", arguments or {}),
        timeout_ms=_timeout(timeout_ms),
    )
    try:
        r = actions.mcp_call(request)
    except Err as e:
        raise action_error(e.value) from None
    status = {
        actions.McpStatus.OK: "ok",
        actions.McpStatus.TOOL_ERROR: "tool-error",
        actions.McpStatus.NOT_FOUND: "not-found",
        actions.McpStatus.NO_ANSWER: "no-answer",
    }[r.status]
    answer: JsonValue = _json.loads(r.answer)
    return status, answer, r.duration_ms


class Snapshot:
    """Copies of workspace files the host keeps outside the workspace (the user's
    ``workspace.restore`` grant), to put back with :meth:`restore`."""

    __slots__ = ("id",)

    def __init__(self, id: str) -> None:  # noqa: A002 - the contract's name
        self.id = id

    @staticmethod
    def take(paths: Sequence[str]) -> "Snapshot":
        """Keep copies of ``paths`` (a missing one, or one that is not a regular
        file, as absent). Raises :class:`ActionError`."""
        from componentize_py_types import Err

        try:
            from wit_world.imports import actions
        except ImportError:
            raise _decider() from None
        try:
            return Snapshot(actions.snapshot([_text("Snapshot.take", p) for p in paths]))
        except Err as e:
            raise action_error(e.value) from None

    def restore(self, paths: Sequence[str]) -> List[str]:
        """Put ``paths`` back as they were taken; the paths written."""
        from componentize_py_types import Err
        from wit_world.imports import actions

        try:
            written: List[str] = actions.restore(self.id, [_text("Snapshot.restore", p) for p in paths])
            return written
        except Err as e:
            raise action_error(e.value) from None

    def forget(self) -> None:
        from wit_world.imports import actions

        actions.forget_snapshot(self.id)


# --- the policy --------------------------------------------------------------


class Policy:
    """The base of a policy: name it ``Policy`` in ``app.py``, set :attr:`name`,
    :attr:`version` and :attr:`description`, and override the ``on_*`` handlers
    of the events it cares about. Each returns a decision; the others
    :func:`wait`. Override :meth:`handle` instead to see every event whole.

    An uncaught :class:`PolicyError` (an :class:`ActionError` included) fails
    the event with its message; any other exception fails it too, with its
    traceback in the run log."""

    name: ClassVar[str] = "policy"
    version: ClassVar[str] = "0.1.0"
    description: ClassVar[str] = ""

    def info(self) -> PolicyInfo:
        from wit_world.exports.policy import PolicyInfo

        return PolicyInfo(name=self.name, version=self.version, description=self.description)

    def on_start(self, input: str) -> Decision:
        """The run begins; ``input`` is its input as JSON text (``{}`` when none)."""
        return wait()

    def on_turn_complete(self, turn: Turn) -> Decision:
        """An agent turn finished: ``turn.response`` is its final message."""
        return wait()

    def on_tool_call(self, call: ToolCall) -> Decision:
        """The agent is about to use a tool: ``call.name``, ``call.input`` (JSON text)."""
        return wait()

    def on_tick(self, snapshot: str) -> Decision:
        """A periodic observation, as JSON text."""
        return wait()

    def on_user_input(self, answer: str) -> Decision:
        """A person's answer to an earlier :func:`ask`."""
        return wait()

    def on_custom(self, name: str, payload: str) -> Decision:
        """Any other hook event: its name and the hook's JSON input as text."""
        return wait()

    def dispatch(self, event: Event) -> Decision:
        """Call the handler for ``event``'s kind."""
        from wit_world.imports import types

        if isinstance(event, types.Event_Start):
            return self.on_start(event.value)
        if isinstance(event, types.Event_TurnComplete):
            return self.on_turn_complete(event.value)
        if isinstance(event, types.Event_ToolCall):
            return self.on_tool_call(event.value)
        if isinstance(event, types.Event_Tick):
            return self.on_tick(event.value)
        if isinstance(event, types.Event_UserInput):
            return self.on_user_input(event.value)
        if isinstance(event, types.Event_Custom):
            return self.on_custom(event.value[0], event.value[1])
        raise PolicyError("an event of a kind this SDK does not know: %r" % (event,))

    def handle(self, event: Event) -> Decision:
        """What the host calls: :meth:`dispatch`, with a :class:`PolicyError`
        turned into the event's error and the decision checked."""
        from componentize_py_types import Err

        try:
            decision = self.dispatch(event)
        except ActionError as e:
            raise Err(e.describe()) from None
        except PolicyError as e:
            raise Err(str(e)) from None
        _check_decision(decision, event)
        return decision


def _check_decision(decision: object, event: object) -> None:
    from wit_world.imports import types

    kinds = (
        types.Decision_Pass,
        types.Decision_Inject,
        types.Decision_Block,
        types.Decision_Rewrite,
        types.Decision_Ask,
        types.Decision_Done,
        types.Decision_Escalate,
        types.Decision_Sleep,
    )
    if not isinstance(decision, kinds):
        from componentize_py_types import Err

        raise Err(
            "the handler of %s returned %s, not a decision: return wait(), inject(...), block(...), "
            "rewrite(...), ask(...), done(...), escalate(...) or sleep_until(...) from loopbox_policy"
            % (_re.sub(r"(?<!^)(?=[A-Z])", "-", type(event).__name__.replace("Event_", "")).lower(), _short(decision))
        )


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# The type names the annotations above use, for `from loopbox_policy import Turn`
# in a policy. They come from the generated bindings, which exist only inside a
# build (or where a test put them); elsewhere they are absent, not an error.
try:
    from wit_world.exports.policy import PolicyInfo  # noqa: E402,F811
    from wit_world.imports.types import Decision, Event, Origin, ToolCall, Turn  # noqa: E402,F811
except ImportError:  # pragma: no cover - outside a build, without bindings
    pass
try:
    from wit_world.imports.actions import Output  # noqa: E402,F811
except ImportError:  # the decider world has no actions
    pass

"""{{name}}: a loopbox policy. It runs a check command; while the check fails, it
hands the failure to the agent and checks again, up to `max_tries` times.

Input (`loopbox run {{name}}.wasm --input '{...}'`):
  {"check": ["make", "test"], "max_tries": 3}
"""

import json
import re

from wit_world import exports
from wit_world.exports.policy import PolicyInfo
from wit_world.imports import actions, log, state, types
from componentize_py_types import Err

EXPECTED = '{"check": ["make", "test"], "max_tries": 3}'


def parse_config(text):
    try:
        raw = json.loads(text)
    except ValueError as e:
        raise Err("{{name}}: bad input: %s; expected %s" % (e, EXPECTED))
    if not isinstance(raw, dict) or set(raw) - {"check", "max_tries"}:
        raise Err("{{name}}: bad input; expected " + EXPECTED)
    check = raw.get("check", ["make", "test"])
    max_tries = raw.get("max_tries", 3)
    if not isinstance(check, list) or not check or not all(isinstance(a, str) for a in check):
        raise Err("{{name}}: bad input: `check` must be a list of strings; expected " + EXPECTED)
    if not isinstance(max_tries, int) or isinstance(max_tries, bool) or max_tries < 0:
        raise Err("{{name}}: bad input: `max_tries` must be a whole number; expected " + EXPECTED)
    return {"check": check, "max_tries": max_tries}


def describe(error):
    """An action-error as one line: `denied: why, and the key that would allow it`."""
    kind = re.sub(r"(?<!^)(?=[A-Z])", " ", type(error).__name__.split("_", 1)[-1]).lower()
    value = getattr(error, "value", None)
    return "%s: %s" % (kind, value) if value else kind


def done(success, summary):
    return types.Decision_Done(types.Outcome(success=success, summary=summary, data=None))


def check(progress):
    argv = progress["config"]["check"]
    command = " ".join(argv)
    try:
        out = actions.shell(actions.ShellRequest_Exec(actions.Command(argv=argv, cwd=None, env=[], stdin=None, timeout_ms=None)))
    except Err as e:
        # A refusal is an answer, not a crash: say what is missing and hand over.
        return types.Decision_Escalate("cannot run `%s`: %s" % (command, describe(e.value)))
    if out.exit_code == 0:
        return done(True, "`%s` passes after %d fix(es)" % (command, progress["fixes"]))
    if progress["fixes"] >= progress["config"]["max_tries"]:
        return done(False, "`%s` still fails after %d fix(es)" % (command, progress["fixes"]))
    progress["fixes"] += 1
    log.write(log.Level.INFO, "`%s` fails; asking the agent for fix %d of %d" % (command, progress["fixes"], progress["config"]["max_tries"]))
    state.set("progress", json.dumps(progress))
    tail = "\n".join((out.stdout + out.stderr).splitlines()[-30:])
    return types.Decision_Inject("`%s` fails:\n%s\nFix the code so that it passes." % (command, tail))


class Policy(exports.Policy):
    def info(self):
        return PolicyInfo(name="{{name}}", version="0.1.0", description="Run a check; while it fails, hand the failure to the agent")

    def handle(self, event):
        if isinstance(event, types.Event_Start):
            return check({"config": parse_config(event.value), "fixes": 0})
        if isinstance(event, types.Event_TurnComplete):
            stored = state.get("progress")
            if stored is None:
                raise Err("{{name}}: a turn arrived before the run started")
            return check(json.loads(stored))
        return types.Decision_Pass()

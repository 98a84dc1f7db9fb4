"""{{name}}: a loopbox policy. It runs a check command; while the check fails, it
hands the failure to the agent and checks again, up to `max_tries` times.

Input (`loopbox run {{name}}.wasm --input '{...}'`):
  {"check": ["make", "test"], "max_tries": 3}

Written with the loopbox_policy SDK (vendored in loopbox_policy/).
"""

from __future__ import annotations

import json
from typing import Any, Dict

from loopbox_policy import ActionError, Decision, PolicyError, Turn, done, escalate, exec, inject, log, state
from loopbox_policy import Policy as Base

EXPECTED = '{"check": ["make", "test"], "max_tries": 3}'


def parse_config(text: str) -> Dict[str, Any]:
    try:
        raw = json.loads(text)
    except ValueError as e:
        raise PolicyError("{{name}}: bad input: %s; expected %s" % (e, EXPECTED))
    if not isinstance(raw, dict) or set(raw) - {"check", "max_tries"}:
        raise PolicyError("{{name}}: bad input; expected " + EXPECTED)
    check = raw.get("check", ["make", "test"])
    max_tries = raw.get("max_tries", 3)
    if not isinstance(check, list) or not check or not all(isinstance(a, str) for a in check):
        raise PolicyError("{{name}}: bad input: `check` must be a list of strings; expected " + EXPECTED)
    if not isinstance(max_tries, int) or isinstance(max_tries, bool) or max_tries < 0:
        raise PolicyError("{{name}}: bad input: `max_tries` must be a whole number; expected " + EXPECTED)
    return {"check": check, "max_tries": max_tries}


def check(progress: Dict[str, Any]) -> Decision:
    argv = progress["config"]["check"]
    command = " ".join(argv)
    try:
        out = exec(argv).run()
    except ActionError as e:
        # A refusal is an answer, not a crash: say what is missing and hand over.
        return escalate("cannot run `%s`: %s" % (command, e.describe()))
    if out.exit_code == 0:
        return done(True, "`%s` passes after %d fix(es)" % (command, progress["fixes"]))
    if progress["fixes"] >= progress["config"]["max_tries"]:
        return done(False, "`%s` still fails after %d fix(es)" % (command, progress["fixes"]))
    progress["fixes"] += 1
    log.info("`%s` fails; asking the agent for fix %d of %d" % (command, progress["fixes"], progress["config"]["max_tries"]))
    state.set("progress", progress)
    tail = "\n".join((out.stdout + out.stderr).splitlines()[-30:])
    return inject("`%s` fails:\n%s\nFix the code so that it passes." % (command, tail))


class Policy(Base):
    name = "{{name}}"
    version = "0.1.0"
    description = "Run a check; while it fails, hand the failure to the agent"

    def on_start(self, input: str) -> Decision:
        return check({"config": parse_config(input), "fixes": 0})

    def on_turn_complete(self, turn: Turn) -> Decision:
        progress = state.get("progress", dict)
        if progress is None:
            raise PolicyError("{{name}}: a turn arrived before the run started")
        return check(progress)

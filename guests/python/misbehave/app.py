"""A Python policy that misbehaves on request, for the tests of what the host does
with a bad guest. The `start` input names the misdeed: {"op": "raise" | "err" |
"malformed" | "bad-data" | "ok"}."""

import json

from wit_world import exports
from wit_world.exports.policy import PolicyInfo
from wit_world.imports import types
from componentize_py_types import Err


class Policy(exports.Policy):
    def info(self):
        return PolicyInfo(name="misbehave-py", version="0.1.0", description="Fails in the way its input asks")

    def handle(self, event):
        if not isinstance(event, types.Event_Start):
            return types.Decision_Pass()
        op = json.loads(event.value)["op"]
        if op == "raise":
            raise RuntimeError("python policy exploded on purpose")
        if op == "err":
            raise Err("python policy refuses on purpose")
        if op == "malformed":
            return "a string, not a decision"
        if op == "bad-data":
            return types.Decision_Done(types.Outcome(success=True, summary="done", data="{not json"))
        return types.Decision_Done(types.Outcome(success=True, summary="ok from python", data=None))

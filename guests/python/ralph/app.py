"""The Ralph loop in Python: keep feeding the agent the same prompt until its reply
carries the completion promise (<promise>TEXT</promise>) or iterations run out.

The same policy as guests/rust/ralph, decision for decision: the tests run both on
the same turns and compare. Written with the loopbox_policy SDK (guests/python/sdk)
and built with componentize-py against wit/ (world decider).
"""

import json

from loopbox_policy import Policy as Base
from loopbox_policy import PolicyError, done, inject, state

KEY = "ralph"
CONFIG_FIELDS = {"prompt", "completion_promise", "max_iterations"}


def find_promise(text):
    """The first <promise>...</promise> in text, stripped; None without one."""
    start = text.find("<promise>")
    if start < 0:
        return None
    start += len("<promise>")
    end = text.find("</promise>", start)
    if end < 0:
        return None
    return text[start:end].strip()


def iteration_prompt(config, n):
    if config["max_iterations"] > 0:
        return "%s\n\n[ralph iteration %d of %d]" % (config["prompt"], n, config["max_iterations"])
    return "%s\n\n[ralph iteration %d]" % (config["prompt"], n)


def parse_config(text):
    expected = '; expected {"prompt": "...", "completion_promise": "...", "max_iterations": N}'
    try:
        raw = json.loads(text)
    except ValueError as e:
        raise PolicyError("ralph: bad input: %s%s" % (e, expected))
    if not isinstance(raw, dict):
        raise PolicyError("ralph: bad input: not an object" + expected)
    unknown = set(raw) - CONFIG_FIELDS
    if unknown:
        raise PolicyError("ralph: bad input: unknown field `%s`%s" % (sorted(unknown)[0], expected))
    prompt = raw.get("prompt")
    promise = raw.get("completion_promise")
    max_iterations = raw.get("max_iterations", 0)
    if not isinstance(prompt, str):
        raise PolicyError("ralph: bad input: missing field `prompt`" + expected)
    if promise is not None and not isinstance(promise, str):
        raise PolicyError("ralph: bad input: `completion_promise` must be a string" + expected)
    if not isinstance(max_iterations, int) or isinstance(max_iterations, bool) or not 0 <= max_iterations < 2**32:
        raise PolicyError("ralph: bad input: `max_iterations` must be a whole number" + expected)
    if not prompt.strip():
        raise PolicyError("ralph: bad input: `prompt` is empty")
    return {"prompt": prompt, "completion_promise": promise, "max_iterations": max_iterations}


class Policy(Base):
    name = "ralph"
    version = "0.1.0"
    description = "Re-feed a prompt until the reply carries the completion promise or iterations run out"

    def on_start(self, input):
        config = parse_config(input)
        state.set(KEY, {"config": config, "iteration": 1})
        return inject(iteration_prompt(config, 1))

    def on_turn_complete(self, turn):
        progress = state.get(KEY, dict)
        if progress is None:
            raise PolicyError("ralph: a turn arrived before the run started; deliver `start` with the loop's input first")
        config = progress["config"]
        promise = config["completion_promise"]
        if promise is not None and find_promise(turn.response) == promise:
            return done(True, "completion promise found after %d iteration(s)" % progress["iteration"])
        if config["max_iterations"] > 0 and progress["iteration"] >= config["max_iterations"]:
            return done(False, "max_iterations (%d) reached without the completion promise" % config["max_iterations"])
        progress["iteration"] += 1
        state.set(KEY, progress)
        return inject(iteration_prompt(config, progress["iteration"]))

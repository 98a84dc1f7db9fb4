"""The CCW loop as a loopbox policy (world loop-policy): INIT, then DEVELOP, DEBUG
and VALIDATE as prompts to one agent conversation, then COMPLETE.

In auto mode the policy picks each next action itself (ccw.select_next_action) and
runs the loop in one event; in interactive mode it asks a person at a MENU after
INIT and after every action. An agent reply whose ACTION_RESULT says
`needs_input` becomes an `ask`; the answer is fed back into the same action.

The logic lives in ccw.py (plain Python, unit-tested natively); this module moves
values between it and the host: state, prompts, the optional validation command,
the log, and the decision.
"""

import json
import re

import ccw
from wit_world import exports
from wit_world.exports.policy import PolicyInfo
from wit_world.imports import actions, log, state, types
from componentize_py_types import Err

KEY = "ccw"


def load():
    stored = state.get(KEY)
    if stored is None:
        raise Err("ccw: an event arrived before the run started; deliver `start` with the loop's input first")
    return json.loads(stored)


def save(s):
    state.set(KEY, json.dumps(s))


def describe(error):
    """An action-error as one line: `denied: why, and the key that would allow it`."""
    kind = re.sub(r"(?<!^)(?=[A-Z])", " ", type(error).__name__.split("_", 1)[-1]).lower()
    value = getattr(error, "value", None)
    return "%s: %s" % (kind, value) if value else kind


def done(success, summary, s):
    completed, total = ccw.counts(s["skill"])
    data = json.dumps({"actions": s["iteration"], "tasks_done": completed, "tasks": total, "validated": s["skill"]["validate"]["passed"]})
    return types.Decision_Done(types.Outcome(success=success, summary=summary, data=data))


def finish(s):
    success, summary = ccw.complete(s)
    save(s)
    log.write(log.Level.INFO, "COMPLETE: " + summary)
    return done(success, "ccw: " + summary, s)


def validate_with_command(s):
    """VALIDATE by running the configured command; None when it cannot run (then
    the agent is asked instead)."""
    argv = s["config"]["validate_command"]
    try:
        out = actions.shell(actions.ShellRequest_Exec(actions.Command(argv=argv, cwd=None, env=[], stdin=None, timeout_ms=None)))
    except Err as e:
        log.write(log.Level.WARN, "VALIDATE: cannot run %s (%s); asking the agent to validate instead" % (json.dumps(argv), describe(e.value)))
        return None
    passed = out.exit_code == 0
    tail = (out.stdout + out.stderr).strip().splitlines()[-5:]
    message = "%s exited with %s%s" % (" ".join(argv), out.exit_code, (": " + " | ".join(tail)) if tail and not passed else "")
    return {"action": "VALIDATE", "status": "success" if passed else "failed", "message": message, "state_updates": {}, "next": None}


def run_action(s, action, answer=None):
    """Run DEVELOP, DEBUG or VALIDATE and fold in its result. Returns a decision
    when the loop must stop here (a question, or the agent cannot be reached)."""
    result = None
    if action == "VALIDATE" and s["config"]["validate_command"] and answer is None:
        result = validate_with_command(s)
    if result is None:
        request = actions.PromptRequest(text=ccw.action_prompt(s, action, answer), kind=actions.PromptKind.PROMPT, model=None, session=s["session"], timeout_ms=None, profile=None, cwd=None)
        try:
            out = actions.prompt(request)
        except Err as e:
            save(s)
            reason = "ccw: %s could not be sent to the agent (%s)" % (action, describe(e.value))
            log.write(log.Level.ERROR, reason)
            return types.Decision_Escalate(reason)
        s["session"] = out.session or s["session"]
        if out.timed_out or out.exit_code not in (0, None):
            result = {"action": action, "status": "failed", "message": "the agent %s" % ("timed out" if out.timed_out else "exited with %s" % out.exit_code), "state_updates": {}, "next": None}
        else:
            result = ccw.parse_action_result(out.stdout)
    if "warning" in result:
        log.write(log.Level.WARN, "%s: %s" % (action, result["warning"]))
    if result["action"] and result["action"] != action:
        log.write(log.Level.WARN, "%s: the agent's ACTION_RESULT names %s; counted as %s" % (action, result["action"], action))
    ccw.apply_result(s, action, result)
    log.write(log.Level.INFO, "%s %s: %s" % (action, result["status"], result["message"]))
    if result["status"] == "needs_input":
        save(s)
        return types.Decision_Ask("ccw: %s needs your input: %s" % (action, result["message"]))
    return None


def next_step(s):
    """After INIT or an action: auto mode runs on; interactive mode shows the menu."""
    if s["config"]["mode"] == "interactive":
        if s["iteration"] >= s["config"]["max_iterations"]:
            return finish(s)
        save(s)
        return types.Decision_Ask(ccw.menu(s))
    while True:
        action = ccw.select_next_action(s)
        if action == "COMPLETE" or action is None:
            return finish(s)
        decision = run_action(s, action)
        if decision is not None:
            return decision


def on_input(s, text):
    if s["awaiting"]:
        decision = run_action(s, s["awaiting"], answer=text)
        return decision or next_step(s)
    if s["config"]["mode"] != "interactive" or s["status"] != "running":
        return types.Decision_Pass()
    choice = ccw.menu_choice(text)
    if choice is None:
        save(s)
        return types.Decision_Ask(ccw.menu(s, "Unknown choice %s." % json.dumps(text.strip()[:80])))
    if choice == "EXIT":
        s["status"] = "failed"
        save(s)
        return done(False, "ccw: stopped at the menu after %d action(s)" % s["iteration"], s)
    if choice == "COMPLETE":
        return finish(s)
    return run_action(s, choice) or next_step(s)


class Policy(exports.Policy):
    def info(self):
        return PolicyInfo(
            name="ccw",
            version="0.1.0",
            description="Walk develop, debug and validate with one agent until the work validates (CCW loop, auto or interactive)",
        )

    def handle(self, event):
        if isinstance(event, types.Event_Start):
            try:
                config = ccw.parse_config(event.value)
            except ccw.BadInput as e:
                raise Err(str(e))
            s = ccw.init(config)
            log.write(log.Level.INFO, "INIT: %d task(s), %s mode" % (len(config["tasks"]), config["mode"]))
            return next_step(s)
        if isinstance(event, types.Event_UserInput):
            return on_input(load(), event.value)
        return types.Decision_Pass()

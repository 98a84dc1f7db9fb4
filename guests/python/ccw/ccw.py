"""The CCW loop's logic as plain Python over plain data, with no component imports,
so it is unit-tested natively (test_ccw.py) and the component glue (app.py) stays thin.

The loop walks INIT, DEVELOP, DEBUG, VALIDATE and COMPLETE. Each DEVELOP, DEBUG
and VALIDATE is a prompt to one agent conversation whose reply ends with an
ACTION_RESULT block; the block's status and state updates move the loop on.
"""

import json
import re

ACTIONS = ("DEVELOP", "DEBUG", "VALIDATE", "COMPLETE")
MENU_CHOICES = {"1": "DEVELOP", "2": "DEBUG", "3": "VALIDATE", "4": "COMPLETE", "5": "EXIT"}
STATUSES = ("success", "failed", "needs_input")
CONFIG_FIELDS = {"task", "mode", "tasks", "max_iterations", "validate_command"}
EXPECTED = ('expected {"task": "...", "mode": "auto"|"interactive", "tasks": ["..."], '
            '"max_iterations": N, "validate_command": ["program", "arg"]}')


class BadInput(Exception):
    pass


def parse_config(text):
    """The run's input, checked; raises BadInput naming the problem."""
    try:
        raw = json.loads(text)
    except ValueError as e:
        raise BadInput("ccw: bad input: %s; %s" % (e, EXPECTED))
    if not isinstance(raw, dict):
        raise BadInput("ccw: bad input: not an object; " + EXPECTED)
    unknown = sorted(set(raw) - CONFIG_FIELDS)
    if unknown:
        raise BadInput("ccw: bad input: unknown field `%s`; %s" % (unknown[0], EXPECTED))
    task = raw.get("task")
    if not isinstance(task, str) or not task.strip():
        raise BadInput("ccw: bad input: `task` must be a non-empty string; " + EXPECTED)
    mode = raw.get("mode", "auto")
    if mode not in ("auto", "interactive"):
        raise BadInput("ccw: bad input: `mode` must be \"auto\" or \"interactive\", not %s" % json.dumps(mode))
    tasks = raw.get("tasks", [task])
    if not isinstance(tasks, list) or not tasks or not all(isinstance(t, str) and t.strip() for t in tasks):
        raise BadInput("ccw: bad input: `tasks` must be a non-empty list of non-empty strings")
    max_iterations = raw.get("max_iterations", 10)
    if not isinstance(max_iterations, int) or isinstance(max_iterations, bool) or not 1 <= max_iterations <= 1000:
        raise BadInput("ccw: bad input: `max_iterations` must be a whole number from 1 to 1000")
    validate = raw.get("validate_command")
    if validate is not None and (not isinstance(validate, list) or not validate or not all(isinstance(a, str) for a in validate)):
        raise BadInput("ccw: bad input: `validate_command` must be a non-empty list of strings (an argv)")
    return {"task": task, "mode": mode, "tasks": tasks, "max_iterations": max_iterations, "validate_command": validate}


def init(config):
    """The loop's state after INIT."""
    return {
        "config": config,
        "status": "running",
        "iteration": 0,
        "session": None,
        "awaiting": None,
        "last": None,
        "skill": {
            "develop": {"tasks": [{"description": t, "status": "pending"} for t in config["tasks"]]},
            "debug": {"confirmed_hypothesis": None},
            "validate": {"passed": None, "message": None},
            "last_action": None,
        },
    }


def counts(skill):
    tasks = skill["develop"]["tasks"]
    return sum(1 for t in tasks if t["status"] == "completed"), len(tasks)


def pending_task(skill):
    for t in skill["develop"]["tasks"]:
        if t["status"] == "pending":
            return t
    return None


def select_next_action(s):
    """Auto mode's choice, after the catalog's selectNextAction. Where that
    function and the catalog's own action sequences disagree, this follows the
    sequences: all tasks developed leads to VALIDATE, a failed VALIDATE to DEBUG,
    and DEBUG repeats until a hypothesis is confirmed."""
    if s["status"] in ("completed", "failed"):
        return None
    if s["iteration"] >= s["config"]["max_iterations"]:
        return "COMPLETE"
    skill = s["skill"]
    if pending_task(skill) is not None:
        return "DEVELOP"
    last = skill["last_action"]
    if last == "DEVELOP":
        completed, total = counts(skill)
        return "DEBUG" if completed < total else "VALIDATE"
    if last == "DEBUG":
        return "VALIDATE" if skill["debug"]["confirmed_hypothesis"] else "DEBUG"
    if last == "VALIDATE":
        return "COMPLETE" if skill["validate"]["passed"] else "DEBUG"
    return "VALIDATE"


RESULT_FORMAT = """End your reply with exactly this block:
ACTION_RESULT:
- action: %s
- status: success | failed | needs_input
- message: <one line for the user>
- state_updates: <a JSON object, {} when none>
NEXT_ACTION_NEEDED: DEVELOP | DEBUG | VALIDATE | COMPLETED | WAITING_INPUT"""


def action_prompt(s, action, answer=None):
    """The prompt for DEVELOP, DEBUG or VALIDATE."""
    skill = s["skill"]
    lines = ["[ccw %s] Overall task: %s" % (action, s["config"]["task"])]
    if action == "DEVELOP":
        t = pending_task(skill)
        if t is not None:
            lines.append("Do this development task now: %s" % t["description"])
        else:
            lines.append("Fix what the last validation found: %s" % (skill["validate"]["message"] or "it failed"))
        lines.append('To add follow-up tasks, put {"add_tasks": ["..."]} in state_updates.')
    elif action == "DEBUG":
        lines.append("Debug the failure: form hypotheses, test them, and confirm one.")
        if skill["validate"]["message"]:
            lines.append("The last validation said: %s" % skill["validate"]["message"])
        lines.append('When a hypothesis is confirmed, report status success with {"confirmed_hypothesis": "..."} in state_updates.')
    elif action == "VALIDATE":
        lines.append("Run the tests and check the work. Report status success only if everything passes.")
    if answer is not None:
        lines.append("The user answered your question: %s" % answer)
    lines.append(RESULT_FORMAT % action)
    return "\n".join(lines)


_FIELD = re.compile(r"^\s*-\s*(action|status|message|state_updates)\s*:\s*(.*)$")
_NEXT = re.compile(r"^\s*NEXT_ACTION_NEEDED\s*:\s*(\S+)", re.MULTILINE)


def parse_action_result(reply):
    """The last ACTION_RESULT block in an agent's reply as a dict with `action`,
    `status`, `message`, `state_updates` and `next`; a reply without a readable
    block counts as a failed action whose message says what was wrong."""
    start = reply.rfind("ACTION_RESULT:")
    if start < 0:
        return {"action": None, "status": "failed", "message": "the agent's reply has no ACTION_RESULT block", "state_updates": {}, "next": None}
    fields = {}
    for line in reply[start + len("ACTION_RESULT:"):].splitlines()[1:]:
        m = _FIELD.match(line)
        if not m:
            if line.strip():
                break
            continue
        fields[m.group(1)] = m.group(2).strip()
    status = fields.get("status", "").lower()
    result = {
        "action": fields.get("action", "").upper() or None,
        "status": status,
        "message": fields.get("message", ""),
        "state_updates": {},
        "next": None,
    }
    if status not in STATUSES:
        result["status"] = "failed"
        result["message"] = "the ACTION_RESULT status is %s, not success, failed or needs_input" % json.dumps(fields.get("status"))
        return result
    updates = fields.get("state_updates", "{}") or "{}"
    try:
        parsed = json.loads(updates)
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        result["warning"] = "state_updates is not a JSON object and was ignored: %s" % updates[:200]
        parsed = {}
    result["state_updates"] = parsed
    m = _NEXT.search(reply, start)
    if m:
        result["next"] = m.group(1).upper()
    return result


def apply_result(s, action, result):
    """Fold one action's result into the loop's state."""
    skill = s["skill"]
    updates = result["state_updates"]
    status = result["status"]
    s["iteration"] += 1
    skill["last_action"] = action
    s["last"] = {"action": action, "status": status, "message": result["message"]}
    if status == "needs_input":
        s["awaiting"] = action
        return
    s["awaiting"] = None
    if action == "DEVELOP":
        t = pending_task(skill)
        if t is not None:
            t["status"] = "completed" if status == "success" else "failed"
        added = updates.get("add_tasks", [])
        if isinstance(added, list):
            skill["develop"]["tasks"] += [{"description": d, "status": "pending"} for d in added if isinstance(d, str) and d.strip()]
    elif action == "DEBUG":
        hypothesis = updates.get("confirmed_hypothesis")
        if status == "success":
            skill["debug"]["confirmed_hypothesis"] = hypothesis if isinstance(hypothesis, str) and hypothesis else result["message"] or "confirmed"
    elif action == "VALIDATE":
        passed = updates.get("passed")
        skill["validate"]["passed"] = passed if isinstance(passed, bool) else status == "success"
        skill["validate"]["message"] = result["message"]
        if not skill["validate"]["passed"]:
            # A new failure starts a new round of debugging.
            skill["debug"]["confirmed_hypothesis"] = None


def complete(s):
    """COMPLETE: the outcome as (success, summary)."""
    s["status"] = "completed"
    skill = s["skill"]
    completed, total = counts(skill)
    passed = skill["validate"]["passed"]
    verdict = {True: "validation passed", False: "validation failed", None: "never validated"}[passed]
    return passed is True, "%d of %d task(s) done, %s, after %d action(s)" % (completed, total, verdict, s["iteration"])


def menu(s, note=None):
    """The MENU question for interactive mode."""
    skill = s["skill"]
    completed, total = counts(skill)
    passed = {True: "passed", False: "failed", None: "not run"}[skill["validate"]["passed"]]
    lines = []
    if note:
        lines.append(note)
    if s["last"]:
        last = s["last"]
        lines.append("Last: %s %s: %s" % (last["action"], last["status"], last["message"]))
    lines.append("ccw: action %d of %d, tasks %d/%d done, validation %s." % (s["iteration"], s["config"]["max_iterations"], completed, total, passed))
    lines.append("Next? 1 develop, 2 debug, 3 validate, 4 complete, 5 exit")
    return "\n".join(lines)


def menu_choice(answer):
    """The action a menu answer names, or None."""
    word = answer.strip().upper()
    if word in MENU_CHOICES:
        return MENU_CHOICES[word]
    return word if word in ACTIONS + ("EXIT",) else None

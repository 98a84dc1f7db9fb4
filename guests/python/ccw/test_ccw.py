"""Native unit tests of the CCW loop's logic: python3 -m unittest (in this directory)."""

import unittest

import ccw


def reply(action, status, message="ok", updates="{}", nxt="VALIDATE"):
    return "did things\n\nACTION_RESULT:\n- action: %s\n- status: %s\n- message: %s\n- state_updates: %s\n\nFILES_UPDATED:\n- a.py: x\n\nNEXT_ACTION_NEEDED: %s\n" % (action, status, message, updates, nxt)


def walk(config, replies):
    """The actions auto mode takes when the agent answers with `replies` in order."""
    s = ccw.init(ccw.parse_config(config))
    path = []
    replies = list(replies)
    while True:
        action = ccw.select_next_action(s)
        path.append(action)
        if action == "COMPLETE":
            return path, ccw.complete(s)
        ccw.apply_result(s, action, ccw.parse_action_result(replies.pop(0)))


class Selection(unittest.TestCase):
    def test_happy_path(self):
        path, (ok, summary) = walk('{"task": "t", "tasks": ["a", "b", "c"]}', [reply("DEVELOP", "success")] * 3 + [reply("VALIDATE", "success")])
        self.assertEqual(path, ["DEVELOP", "DEVELOP", "DEVELOP", "VALIDATE", "COMPLETE"])
        self.assertTrue(ok)
        self.assertEqual(summary, "3 of 3 task(s) done, validation passed, after 4 action(s)")

    def test_debug_path(self):
        replies = [reply("DEVELOP", "success"), reply("VALIDATE", "failed", "2 tests fail"), reply("DEBUG", "failed"),
                   reply("DEBUG", "success", "off by one", '{"confirmed_hypothesis": "loop bound"}'), reply("VALIDATE", "success")]
        path, (ok, _) = walk('{"task": "t"}', replies)
        self.assertEqual(path, ["DEVELOP", "VALIDATE", "DEBUG", "DEBUG", "VALIDATE", "COMPLETE"])
        self.assertTrue(ok)

    def test_a_failed_task_is_debugged(self):
        path, _ = walk('{"task": "t", "max_iterations": 3}', [reply("DEVELOP", "failed"), reply("DEBUG", "success"), reply("VALIDATE", "failed")])
        self.assertEqual(path, ["DEVELOP", "DEBUG", "VALIDATE", "COMPLETE"])

    def test_the_iteration_budget_completes_the_loop_as_a_failure(self):
        path, (ok, summary) = walk('{"task": "t", "max_iterations": 2}', [reply("DEVELOP", "success"), reply("VALIDATE", "failed")])
        self.assertEqual(path, ["DEVELOP", "VALIDATE", "COMPLETE"])
        self.assertFalse(ok)
        self.assertIn("validation failed", summary)

    def test_added_tasks_are_developed(self):
        path, _ = walk('{"task": "t"}', [reply("DEVELOP", "success", updates='{"add_tasks": ["more"]}'), reply("DEVELOP", "success"), reply("VALIDATE", "success")])
        self.assertEqual(path, ["DEVELOP", "DEVELOP", "VALIDATE", "COMPLETE"])


class Parsing(unittest.TestCase):
    def test_a_full_block(self):
        r = ccw.parse_action_result(reply("develop", "SUCCESS", "made it", '{"k": [1, 2]}', "debug"))
        self.assertEqual(r, {"action": "DEVELOP", "status": "success", "message": "made it", "state_updates": {"k": [1, 2]}, "next": "DEBUG"})

    def test_the_last_block_counts(self):
        r = ccw.parse_action_result(reply("DEVELOP", "failed") + "\n" + reply("DEVELOP", "success", "second"))
        self.assertEqual((r["status"], r["message"]), ("success", "second"))

    def test_a_missing_block_or_status_is_a_failure(self):
        self.assertEqual(ccw.parse_action_result("I did it!")["status"], "failed")
        r = ccw.parse_action_result(reply("DEVELOP", "great"))
        self.assertEqual(r["status"], "failed")
        self.assertIn('"great"', r["message"])

    def test_bad_state_updates_are_ignored_with_a_warning(self):
        r = ccw.parse_action_result(reply("DEVELOP", "success", updates="{not json"))
        self.assertEqual((r["status"], r["state_updates"]), ("success", {}))
        self.assertIn("not a JSON object", r["warning"])


class Config(unittest.TestCase):
    def test_defaults(self):
        c = ccw.parse_config('{"task": "fix it"}')
        self.assertEqual(c, {"task": "fix it", "mode": "auto", "tasks": ["fix it"], "max_iterations": 10, "validate_command": None})

    def test_bad_inputs_name_the_field(self):
        for text, needle in [("[]", "not an object"), ('{"task": ""}', "`task`"), ('{"task": "t", "mode": "x"}', "`mode`"),
                             ('{"task": "t", "tasks": []}', "`tasks`"), ('{"task": "t", "max_iterations": 0}', "`max_iterations`"),
                             ('{"task": "t", "validate_command": "make"}', "`validate_command`"), ('{"task": "t", "x": 1}', "unknown field `x`"), ("{", "bad input")]:
            with self.assertRaises(ccw.BadInput) as e:
                ccw.parse_config(text)
            self.assertIn(needle, str(e.exception), text)

    def test_menu_choices(self):
        self.assertEqual([ccw.menu_choice(a) for a in ["1", " develop ", "Validate", "5", "exit", "nonsense", ""]],
                         ["DEVELOP", "DEVELOP", "VALIDATE", "EXIT", "EXIT", None, None])


if __name__ == "__main__":
    unittest.main()

"""The exceptions a policy sees: :class:`PolicyError` fails the event with its
message; :class:`ActionError` (and one subclass per kind) is the host's refusal
of an action."""

from __future__ import annotations

from typing import ClassVar, Dict, Type


class PolicyError(Exception):
    """Fails the event with this message when the policy does not catch it; the
    host records it as the policy's error (``raise PolicyError("bad input: ...")``)."""


class WorkspaceError(PolicyError):
    """A workspace file or directory could not be read; the message says why."""


class ActionError(PolicyError):
    """The host did not run an action. :attr:`kind` is the contract's name for
    why (``denied``, ``declined``, ``budget-exhausted``, ``invalid``,
    ``unavailable``, ``outcome-unknown``); :attr:`message` is the host's text,
    which names the configuration key that would allow it. Catch a subclass
    (:class:`Denied`, ...) to handle one kind."""

    kind: ClassVar[str] = "action-error"

    def __init__(self, message: str = "") -> None:
        super().__init__(message)
        self.message = message

    def describe(self) -> str:
        """One line for a log or an escalation: ``denied: <why, and the key that would allow it>``."""
        return "%s: %s" % (self.kind.replace("-", " "), self.message) if self.message else self.kind.replace("-", " ")

    def __str__(self) -> str:
        return self.describe()

    def __repr__(self) -> str:
        return "%s(%r)" % (type(self).__name__, self.message)


class Denied(ActionError):
    """No grant covers the request; the message names the key that would allow it."""

    kind = "denied"


class Declined(ActionError):
    """A person said no at confirmation, or no person could be asked."""

    kind = "declined"


class BudgetExhausted(ActionError):
    """A run budget (actions, prompts, time) is spent; the message names it."""

    kind = "budget-exhausted"


class Invalid(ActionError):
    """The request is malformed: empty argv, a cwd outside the workspace, a string too long."""

    kind = "invalid"


class Unavailable(ActionError):
    """The runner could not start: program missing, agent not configured."""

    kind = "unavailable"


class OutcomeUnknown(ActionError):
    """After a crash, this action may or may not have run."""

    kind = "outcome-unknown"

    def describe(self) -> str:
        return "outcome unknown: the run was interrupted while this action ran, so it may or may not have happened"


_KINDS: Dict[str, Type[ActionError]] = {
    "ActionError_Denied": Denied,
    "ActionError_Declined": Declined,
    "ActionError_BudgetExhausted": BudgetExhausted,
    "ActionError_Invalid": Invalid,
    "ActionError_Unavailable": Unavailable,
    "ActionError_OutcomeUnknown": OutcomeUnknown,
}


def action_error(value: object) -> ActionError:
    """The exception for the bindings' ``ActionError_*`` value."""
    cls = _KINDS.get(type(value).__name__, ActionError)
    message = getattr(value, "value", None)
    return cls(message if isinstance(message, str) else "")

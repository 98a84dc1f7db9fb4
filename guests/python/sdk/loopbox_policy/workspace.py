"""Read-only access to the workspace's files, by paths relative to its root.

Needs the ``loop-policy`` world. ``..`` that leaves the root, absolute paths,
symlinks out, loopbox's store and the paths the user hid are refused."""

from __future__ import annotations

from typing import List

from ._errors import PolicyError, WorkspaceError


def _decider() -> PolicyError:
    """What a read says in a component built for the `decider` world, whose
    bindings have no `workspace` module."""
    return PolicyError(
        "this policy is built for the `decider` world, which reads no files: "
        'set world = "loop-policy" in policy.toml to read the workspace'
    )


def read(path: str) -> str:
    """The file's text; raises :class:`WorkspaceError` saying why it cannot be read."""
    from componentize_py_types import Err

    try:
        from wit_world.imports import workspace as host
    except ImportError:
        raise _decider() from None
    try:
        text: str = host.read(path)
        return text
    except Err as e:
        raise WorkspaceError(str(e.value)) from None


def list_dir(directory: str = "") -> List[str]:
    """The names in ``directory`` (``""`` for the root), sorted; directories end in ``/``."""
    from componentize_py_types import Err

    try:
        from wit_world.imports import workspace as host
    except ImportError:
        raise _decider() from None
    try:
        return list(host.list_dir(directory))
    except Err as e:
        raise WorkspaceError(str(e.value)) from None

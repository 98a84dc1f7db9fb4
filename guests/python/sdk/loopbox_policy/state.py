"""The run's durable state: JSON values under string keys.

Writes made while handling an event are seen by later reads in the same event
and committed with the event's decision; if the event fails, they are dropped.
The policy keeps nothing else between events: each one runs in a fresh instance.
"""

from __future__ import annotations

import json
from typing import List, Optional, Type, TypeVar, overload

from ._errors import PolicyError
from ._types import JsonValue

T = TypeVar("T")


@overload
def get(key: str) -> JsonValue: ...
@overload
def get(key: str, kind: Type[T]) -> Optional[T]: ...
@overload
def get(key: str, kind: Type[T], default: T) -> T: ...


def get(key: str, kind: Optional[type] = None, default: object = None) -> object:
    """The value under ``key``, or ``default`` (``None``) when there is none.

    With ``kind`` (``int``, ``str``, ``dict``, ``list``, ``bool``, ``float``), a
    stored value of another type raises :class:`PolicyError` naming the key:
    ``state.get("tries", int, 0)``."""
    from wit_world.imports import state as host

    text = host.get(key)
    if text is None:
        return default
    value = json.loads(text)
    if kind is None:
        return value
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise PolicyError(
            "state `%s` is not the expected shape: expected %s, found %s"
            % (key, kind.__name__, type(value).__name__)
        )
    return value


def set(key: str, value: object) -> None:
    """Store ``value`` (any JSON value) under ``key``. Raises :class:`PolicyError`
    naming the limit when it, or the run's whole state, is too large."""
    from componentize_py_types import Err
    from wit_world.imports import state as host

    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise PolicyError("state `%s` is not JSON: %s" % (key, e)) from None
    try:
        host.set(key, text)
    except Err as e:
        raise PolicyError(str(e.value)) from None


def remove(key: str) -> None:
    """Forget ``key``; nothing happens when it is absent."""
    from wit_world.imports import state as host

    host.remove(key)


def keys(prefix: str = "") -> List[str]:
    """The keys that begin with ``prefix``, sorted (``""`` lists all)."""
    from wit_world.imports import state as host

    return list(host.keys(prefix))

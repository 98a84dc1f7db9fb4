"""The type of a JSON value, as :func:`json.loads` returns it."""

from __future__ import annotations

from typing import Dict, List, Union

JsonValue = Union[None, bool, int, float, str, List["JsonValue"], Dict[str, "JsonValue"]]

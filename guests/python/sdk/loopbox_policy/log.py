"""Messages for the run log, and the run's one-line status."""

from __future__ import annotations


def _write(level: str, message: str) -> None:
    from wit_world.imports import log as host

    host.write(getattr(host.Level, level), message)


def debug(message: str) -> None:
    """Detail for policy authors."""
    _write("DEBUG", message)


def info(message: str) -> None:
    """Normal progress."""
    _write("INFO", message)


def warn(message: str) -> None:
    """Something the user may want to look at."""
    _write("WARN", message)


def error(message: str) -> None:
    """Something went wrong."""
    _write("ERROR", message)


def progress(message: str) -> None:
    """The status line the user sees while the run goes (``fix-tests · step 3/10``);
    it replaces the previous one and is not kept in the run log."""
    from wit_world.imports import log as host

    host.progress(message)

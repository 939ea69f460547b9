"""Progress events the engine emits while steps run; the CLI renders them (no rich here).

The engine calls a :class:`ProgressSink` around every step on every host. It imports neither
typer nor rich: renderers live in :mod:`orchestrator.views` and are passed in by the CLI.
:class:`NullProgress` is the default: it does nothing (``--json``, tests, library use).

**Lifecycle**: for each (host, phase, step) the engine calls :meth:`ProgressSink.step_started`
once, then :meth:`ProgressSink.step_finished` once with the step's final status (``completed``,
``failed``, ``blocked``, ``interrupted``, ...), also when the step raised. Calls may come from
several threads (one per host); a sink must be thread-safe and must never raise.
"""

from __future__ import annotations

from typing import Protocol


class ProgressSink(Protocol):
    """Receives step start/end events; implementations must be thread-safe and never raise."""

    def step_started(self, host: str, phase: str, step: str) -> None:
        """``step`` of ``phase`` began on ``host``."""
        ...

    def step_finished(self, host: str, phase: str, step: str, status: str, duration_s: float) -> None:
        """``step`` of ``phase`` ended on ``host`` with ``status`` after ``duration_s`` seconds."""
        ...


class NullProgress:
    """A :class:`ProgressSink` that ignores every event."""

    def step_started(self, host: str, phase: str, step: str) -> None:
        return None

    def step_finished(self, host: str, phase: str, step: str, status: str, duration_s: float) -> None:
        return None


NULL_PROGRESS: ProgressSink = NullProgress()

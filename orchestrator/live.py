"""Renderers of :class:`orchestrator.progress.ProgressSink` for humans (Rich), on stderr.

- :class:`LiveProgress` (a terminal): one live line per host for the step it is running, with a
  spinner and the elapsed time (``rich.live``); each finished step leaves one line above it.
- :class:`PlainProgress` (a pipe, a CI log): one line when a step starts, one when it ends.
- ``--json``: :class:`orchestrator.progress.NullProgress`, nothing at all.

:func:`make_progress` picks one. Both are thread-safe (steps run in one thread per host) and
idempotent: a start or end reported twice for the same (host, phase, step) is shown once, so the
engine may call a sink directly and also emit the same events through ``notify``.

**Lifecycle** of :class:`LiveProgress`: the live area starts with the first running step and
stops (erased) as soon as no step runs, so an approval prompt between steps never fights with
it; :meth:`LiveProgress.close` (also called at exit) stops it for good.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
from collections.abc import Callable
from typing import IO, TYPE_CHECKING

from rich.console import Console, Group, RenderableType
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from orchestrator.progress import NullProgress, ProgressSink

if TYPE_CHECKING:
    from rich.live import Live

STYLE = {
    "completed": "green",
    "failed": "red",
    "blocked": "yellow",
    "interrupted": "magenta",
    "skipped": "dim",
}
MARK = {"completed": "✓", "failed": "⨯", "blocked": "!", "interrupted": "↯", "skipped": "-"}

Key = tuple[str, str, str]  # (host, phase, step)


def fmt_duration(seconds: float) -> str:
    """``4.2s``, ``12m05s``, ``1h02m``: short and fixed-format, for progress lines."""
    s = max(0.0, seconds)
    if s < 60:
        return f"{s:.1f}s"
    if s < 3600:
        m, sec = divmod(int(s), 60)
        return f"{m}m{sec:02d}s"
    h, rem = divmod(int(s), 3600)
    return f"{h}h{rem // 60:02d}m"


def started_line(host: str, phase: str, step: str) -> Text:
    return Text(f"  [{host}] {phase} {step} ", style="") + Text("started", style="cyan")


def finished_line(host: str, phase: str, step: str, status: str, duration_s: float) -> Text:
    mark = MARK.get(status, "?")
    return (
        Text(f"  [{host}] {phase} {step} ")
        + Text(f"{mark} {status}", style=STYLE.get(status, ""))
        + Text(f" in {fmt_duration(duration_s)}", style="dim")
    )


class _Tracker:
    """The running steps, their start times, and de-duplication of repeated events."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.lock = threading.Lock()
        self.running: dict[Key, float] = {}

    def start(self, key: Key) -> bool:
        with self.lock:
            if key in self.running:
                return False
            self.running[key] = self.clock()
            return True

    def finish(self, key: Key) -> float | None:
        """Seconds since the step started, or None if it was not running (a repeated end)."""
        with self.lock:
            t0 = self.running.pop(key, None)
        return None if t0 is None else self.clock() - t0


class PlainProgress:
    """One line per step start and end on ``console`` (no cursor movement: pipes and CI logs)."""

    def __init__(self, console: Console, clock: Callable[[], float] = time.monotonic) -> None:
        self.console = console
        self._t = _Tracker(clock)

    def step_started(self, host: str, phase: str, step: str) -> None:
        if self._t.start((host, phase, step)):
            self.console.print(started_line(host, phase, step))

    def step_finished(self, host: str, phase: str, step: str, status: str, duration_s: float) -> None:
        if self._t.finish((host, phase, step)) is not None:
            self.console.print(finished_line(host, phase, step, status, duration_s))


class LiveProgress:
    """A live area on a terminal: one line per host running a step (spinner, step, elapsed)."""

    def __init__(
        self, console: Console, clock: Callable[[], float] = time.monotonic, refresh_per_second: float = 8
    ) -> None:
        self.console = console
        self.refresh_per_second = refresh_per_second
        self._t = _Tracker(clock)
        self._spinners: dict[Key, Spinner] = {}
        self._live: Live | None = None
        self._closed = False
        # start/stop of the live area; never held with the tracker lock, which Rich's refresh
        # thread takes (through renderable()) while Live.start/stop wait for it
        self._mu = threading.Lock()
        atexit.register(self.close)

    # -- rendering -----------------------------------------------------------------------------
    def renderable(self) -> RenderableType:
        """What the live area shows now (called by Rich's refresh thread)."""
        now = self._t.clock()
        with self._t.lock:
            rows = sorted(self._t.running.items())
            spinners = [self._spinners.setdefault(k, Spinner("dots", style="cyan")) for k, _ in rows]
        grid = Table.grid(padding=(0, 1))
        grid.add_column(width=1)
        grid.add_column()
        grid.add_column(justify="right", style="dim")
        for ((host, phase, step), t0), spinner in zip(rows, spinners, strict=True):
            grid.add_row(spinner, Text(f"[{host}] {phase} {step}"), fmt_duration(now - t0))
        return Group(grid) if rows else Text("")

    # -- the sink ------------------------------------------------------------------------------
    def step_started(self, host: str, phase: str, step: str) -> None:
        if not self._t.start((host, phase, step)):
            return
        with self._mu:
            if self._live is None and not self._closed:
                from rich.live import Live

                self._live = Live(
                    console=self.console,
                    get_renderable=self.renderable,
                    refresh_per_second=self.refresh_per_second,
                    transient=True,
                    redirect_stdout=False,
                    redirect_stderr=False,
                )
                self._live.start()

    def step_finished(self, host: str, phase: str, step: str, status: str, duration_s: float) -> None:
        key = (host, phase, step)
        if self._t.finish(key) is None:
            return
        with self._t.lock:
            self._spinners.pop(key, None)
        with self._mu:  # redraw without the finished step first: Rich reprints the last frame below a print
            if self._live is not None and self._t.running:
                self._live.refresh()
        self.console.print(finished_line(host, phase, step, status, duration_s))
        with self._mu:
            if not self._t.running and self._live is not None:
                live, self._live = self._live, None
                live.stop()

    def close(self) -> None:
        """Stop the live area (idempotent); later events print nothing live."""
        with self._mu:
            self._closed = True
            live, self._live = self._live, None
            if live is not None:
                live.stop()


def is_terminal(stream: IO[str]) -> bool:
    """A real terminal that can redraw lines (not ``TERM=dumb``, not a pipe)."""
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        return False
    return tty and os.environ.get("TERM", "") != "dumb"


def make_progress(console: Console, *, as_json: bool, live: bool | None = None) -> ProgressSink:
    """The sink for this invocation: nothing with ``--json``; live on a terminal; plain lines otherwise."""
    if as_json:
        return NullProgress()
    if live is None:
        live = is_terminal(console.file)
    return LiveProgress(console) if live else PlainProgress(console)

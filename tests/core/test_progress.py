"""Progress of long steps: a live line per host on a terminal, plain start/end lines otherwise,
nothing with --json; the engine talks to a ProgressSink that imports no rich."""

from __future__ import annotations

import io
import json
import subprocess
import sys

from core_helpers import REPO, invoke, phase, step, tool
from rich.console import Console

from orchestrator.execution import Event
from orchestrator.live import LiveProgress, PlainProgress, fmt_duration, make_progress
from orchestrator.progress import NullProgress, ProgressSink
from orchestrator.views import EventRenderer


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def step_started(self, host: str, phase: str, step: str) -> None:
        self.calls.append(("start", host, phase, step))

    def step_finished(self, host: str, phase: str, step: str, status: str, duration_s: float) -> None:
        self.calls.append(("end", host, phase, step, status, duration_s))


def console(tty: bool) -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, force_terminal=tty, width=120, color_system=None, highlight=False), buf


def test_progress_module_imports_no_rich_or_typer():
    code = "import sys, orchestrator.progress as p; p.NullProgress().step_started('h','0-a','s'); "
    code += "print(sorted(m for m in sys.modules if m.split('.')[0] in ('rich', 'typer', 'click')))"
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "[]"


def test_null_progress_is_a_sink_that_does_nothing():
    sink: ProgressSink = NullProgress()
    assert sink.step_started("h", "0-a", "s") is None
    assert sink.step_finished("h", "0-a", "s", "completed", 1.0) is None


def test_duration_format():
    assert [fmt_duration(s) for s in (0.04, 12.34, 65, 3599, 3725)] == ["0.0s", "12.3s", "1m05s", "59m59s", "1h02m"]


def test_plain_progress_prints_one_start_and_one_end_line_per_step():
    con, buf = console(tty=False)
    p = PlainProgress(con, clock=Clock())
    p.step_started("gpu-01", "0-build-check", "build")
    p.step_started("gpu-01", "0-build-check", "build")  # repeated: shown once
    p.step_finished("gpu-01", "0-build-check", "build", "failed", 903.2)
    p.step_finished("gpu-01", "0-build-check", "build", "failed", 903.2)
    assert buf.getvalue().splitlines() == [
        "  [gpu-01] 0-build-check build started",
        "  [gpu-01] 0-build-check build ⨯ failed in 15m03s",
    ]


def test_live_progress_shows_each_running_host_with_elapsed_time_and_stops_when_idle():
    con, buf = console(tty=True)
    clock = Clock()
    p = LiveProgress(con, clock=clock, refresh_per_second=50)
    try:
        p.step_started("gpu-02", "3-integration", "restart")
        clock.t += 2
        p.step_started("gpu-01", "3-integration", "restart")
        clock.t += 95
        shown = Console(file=io.StringIO(), width=100, color_system=None)
        shown.print(p.renderable())
        lines = [ln.strip() for ln in shown.file.getvalue().splitlines() if ln.strip()]
        assert len(lines) == 2, lines
        # a spinner glyph, then host, phase, step and the elapsed time; hosts in name order
        assert lines[0][0] != "[" and lines[0][1:] == " [gpu-01] 3-integration restart 1m35s", lines
        assert lines[1][0] != "[" and lines[1][1:] == " [gpu-02] 3-integration restart 1m37s", lines
        assert p._live is not None and p._live.is_started
        p.step_finished("gpu-02", "3-integration", "restart", "completed", 97.0)
        assert p._live is not None  # gpu-01 still running
        p.step_finished("gpu-01", "3-integration", "restart", "interrupted", 95.0)
        assert p._live is None  # idle: the live area is gone (an approval prompt may follow)
    finally:
        p.close()
    text = buf.getvalue()
    assert "[gpu-02] 3-integration restart ✓ completed in 1m37s" in text
    assert "[gpu-01] 3-integration restart ↯ interrupted in 1m35s" in text


def test_make_progress_picks_by_json_and_terminal():
    tty, _ = console(tty=True)
    pipe, _ = console(tty=False)
    assert isinstance(make_progress(tty, as_json=True), NullProgress)
    assert isinstance(make_progress(pipe, as_json=False), PlainProgress)
    live = make_progress(tty, as_json=False, live=True)
    assert isinstance(live, LiveProgress)
    live.close()


def test_event_renderer_feeds_the_sink_with_measured_durations():
    rec, clock = Recorder(), Clock()
    r = EventRenderer(rec, clock=clock)
    r(Event(kind="step_started", phase="0-a", step="s", host="h1"))
    clock.t += 4.5
    r(Event(kind="step_finished", phase="0-a", step="s", host="h1", status="completed"))
    r(Event(kind="warning", message="w"))
    assert rec.calls == [("start", "h1", "0-a", "s"), ("end", "h1", "0-a", "s", "completed", 4.5)]


def test_human_run_without_tty_prints_start_and_end_lines_and_json_prints_none(ws):
    ws.hosts(["g1", "g2"])
    ws.write_phase(phase(0, "a", [step("s", tool("--metric", "n=1"))]))
    r = invoke("run", "0")
    assert r.exit_code == 0, r.output
    for h in ("g1", "g2"):  # once each: the engine feeds the sink, on_event no longer forwards steps
        assert r.stderr.count(f"[{h}] 0-a s started") == 1, r.stderr
        assert r.stderr.count(f"[{h}] 0-a s ✓ completed in ") == 1, r.stderr
    rj = invoke("run", "0", "--yes", "--json")
    assert rj.exit_code == 0, rj.output
    assert json.loads(rj.stdout)["ok"] is True
    assert "started" not in rj.stderr and "✓" not in rj.stderr


def test_engine_fed_renderer_leaves_step_lines_to_the_sink():
    rec = Recorder()
    r = EventRenderer(rec, forward=False)
    r(Event(kind="step_started", phase="0-a", step="s", host="h1"))
    r(Event(kind="step_finished", phase="0-a", step="s", host="h1", status="failed", message="boom"))
    assert rec.calls == []


def test_on_a_terminal_each_running_host_has_a_live_line_with_elapsed_time(ws):
    """A real pty: the live area (cursor hidden, redrawn) shows `[host] phase step <elapsed>` for
    both hosts while the step runs; the finished lines stay; the live area is gone at the end."""
    import os
    import pty
    import re

    ws.hosts(["g1", "g2"])
    ws.write_phase(phase(0, "slow", [step("build", tool("--sleep", "1.2"))]))
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "run", "0"],
        cwd=REPO,
        env={**os.environ, **ws.env(), "TERM": "xterm", "COLUMNS": "100"},
        stdin=slave,
        stdout=subprocess.DEVNULL,
        stderr=slave,
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert proc.wait(timeout=60) == 0
    text = b"".join(chunks).decode("utf-8", "replace")
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)
    assert "\x1b[?25l" in text and "\x1b[?25h" in text  # Rich's live area: cursor hidden, then shown
    for h in ("g1", "g2"):
        assert re.search(rf"\[{h}\] 0-slow build \d+\.\ds", plain), plain
        assert f"[{h}] 0-slow build ✓ completed in " in plain
    assert "started" not in plain  # plain start lines are for pipes only

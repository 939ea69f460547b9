"""Human rendering (Rich) of the engine's typed results, and the interactive approval prompt.

Results go to stdout; progress, warnings, errors and prompts go to stderr.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rich.table import Table
from rich.text import Text

from orchestrator.statusview import (
    MARK,
    STYLE,
    bundle_summary,
    err,
    error_line,
    evidence_summary,
    out,
    render_status,
    styled,
)

if TYPE_CHECKING:  # the engine is not imported by `status`
    from orchestrator.approval import ApprovalSummary
    from orchestrator.engine import RunReport
    from orchestrator.execution import Event
    from orchestrator.planner import Plan
    from orchestrator.progress import ProgressSink

__all__ = [
    "MARK",
    "STYLE",
    "EventRenderer",
    "InteractiveApprover",
    "bundle_summary",
    "err",
    "error_line",
    "evidence_summary",
    "host_bundle",
    "human_progress",
    "on_event",
    "out",
    "render_facts",
    "render_plan",
    "render_report",
    "render_status",
    "styled",
]

CONTROLLER = "@local"  # orchestrator.planner.CONTROLLER, repeated to keep `status` lean
APPROVE_WORD = "yes"  # orchestrator.approval.APPROVE_WORD


class EventRenderer:
    """Renders the engine's ``notify`` events on stderr: phase headers, warnings, rollbacks, and
    each step's start and end through a :class:`~orchestrator.progress.ProgressSink` (a live line
    per host on a terminal, plain start/end lines otherwise; see :mod:`orchestrator.live`).

    The end line is followed by the step's reason and, unless it completed, where its log is."""

    def __init__(
        self, sink: ProgressSink | None = None, clock: Callable[[], float] = time.monotonic, *, forward: bool = True
    ) -> None:
        self._sink = sink
        self._clock = clock
        self.forward = forward  # False once the engine calls the sink itself (it knows the durations)
        self._mu = threading.Lock()
        self._started: dict[tuple[str, str, str], float] = {}

    @property
    def sink(self) -> ProgressSink:
        if self._sink is None:
            from orchestrator.live import make_progress

            self._sink = make_progress(err, as_json=False)
        return self._sink

    def __call__(self, e: Event) -> None:
        key = (e.host or "", e.phase or "", e.step or "")
        if e.kind == "phase_started":
            err.print(Text(f"--> Phase {e.phase}: {e.message}", style="bold"))
        elif e.kind == "step_started":
            with self._mu:
                self._started.setdefault(key, self._clock())
            if self.forward:
                self.sink.step_started(*key)
        elif e.kind == "step_finished":
            st = e.status or ""
            with self._mu:
                t0 = self._started.pop(key, None)
            if self.forward:
                self.sink.step_finished(*key, st, 0.0 if t0 is None else self._clock() - t0)
            if e.message:
                err.print(Text(f"      {e.message}", style=STYLE.get(st, "")))
            if st != "completed" and e.log_path:
                err.print(Text(f"      View logs: {e.log_path}", style="dim"))
        elif e.kind == "rollback":
            err.print(Text(f"  [{e.host}] ↺ {e.step}: {e.message}", style="yellow"))
        elif e.kind == "warning":
            err.print(Text(f"Warning: {e.message}", style="yellow"))
        elif e.kind == "message":
            err.print(Text(f"--> Phase {e.phase}: {e.message}"))
        elif e.kind == "phase_finished":
            st = e.status or ""
            err.print(Text(f"<-- Phase {e.phase}: ") + styled(st) + Text(f" {e.message}" if e.message else ""))

    def close(self) -> None:
        """Stop a live display, if any (the live area also stops by itself when no step runs)."""
        close = getattr(self._sink, "close", None)
        if callable(close):
            close()


_renderer: EventRenderer | None = None


def _the_renderer() -> EventRenderer:
    global _renderer
    if _renderer is None:
        _renderer = EventRenderer()
    return _renderer


def on_event(e: Event) -> None:
    """The CLI's ``notify`` callback: one :class:`EventRenderer` per process."""
    _the_renderer()(e)


def human_progress() -> ProgressSink:
    """The progress sink for the engine (``Engine(progress=...)``): live lines on a terminal,
    plain start/end lines otherwise. From then on :func:`on_event` leaves step lines to it."""
    r = _the_renderer()
    r.forward = False
    return r.sink


def render_plan(plan: Plan, *, title: str, show_actions: bool) -> None:
    out.print(
        Text(
            f"{title}: bundle {plan.bundle_sha[:12]}  inventory {plan.inventory}  hosts {len(plan.hosts)}", style="bold"
        )
    )
    counts: dict[str, int] = {}
    for ph in plan.phases:
        out.print(
            Text(
                f"\n# phase {ph.label}: {ph.title}" + ("  [requires approval]" if ph.needs_approval else ""),
                style="bold",
            )
        )
        if show_actions:
            for a in ph.actions:
                counts[a.action] = counts.get(a.action, 0) + 1
                sym = {"run": "+", "resume": "~", "up_to_date": "=", "refused": "!"}[a.action]
                out.print(f"  {sym} {a.host}: {a.action}" + (f" ({a.detail})" if a.detail else ""))
        for b in ph.bundle:
            out.print(Text(f"  bundle [{b.host}] {b.display}", style="cyan"))
        if ph.bundle:
            out.print(
                Text(
                    "    (hash-checked on the host before every step; uploaded only if the host lacks "
                    "this sha256, unpacked only if the tree is missing or differs)",
                    style="dim",
                )
            )
        for s in ph.steps:
            flag = " [approval]" if s.requires_approval else ""
            waves = f" waves {s.waves}" if s.waves else ""
            out.print(Text(f"  step {s.id} ({s.runs_on}{waves}){flag}: {s.title}"))
            for c in s.commands:
                out.print(Text(f"    [{c.host}] {c.display}", style="dim" if c.host == CONTROLLER else ""))
        for s in ph.rollback_steps:
            out.print(Text(f"  rollback {s.id}: {s.title}", style="yellow"))
            for c in s.commands[:3]:
                out.print(Text(f"    [{c.host}] {c.display}", style="dim"))
            if len(s.commands) > 3:
                out.print(Text(f"    ... and {len(s.commands) - 3} more hosts", style="dim"))
        for p in ph.problems:
            err.print(Text(f"  problem: {p}", style="red"))
    if show_actions:
        out.print(Text("\nPlan: " + ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in sorted(counts.items())) + "."))
    out.print(Text(f"Plan digest: {plan.digest}", style="bold"))


def host_bundle(hp: Any) -> str:
    """``<sha12> verified (uploaded|repaired|present)`` for one host of a phase record; ``-`` if none."""
    ev = getattr(hp, "bundle", None)
    if ev is None:
        return "-"
    how = "uploaded" if ev.uploaded else "repaired" if ev.repaired else "present"
    what = "verified" if ev.verified else f"NOT verified ({ev.last_check})"
    return f"{ev.sha256[:12]} {what}, {how}"


def render_report(report: RunReport) -> None:
    t = Table(title=f"run {report.run_id}")
    for col in ("phase", "host", "status", "bundle", "reason"):
        t.add_column(col.upper(), overflow="fold")
    for rec in report.phases:
        for h, hp in rec.hosts.items():
            t.add_row(f"{rec.id}-{rec.name}", h, styled(hp.status.value), host_bundle(hp), hp.reason or "")
    for label in report.skipped_phases:
        t.add_row(label, "*", styled("skipped"), "", "up to date (passed with this bundle and spec)")
    out.print(t)


class InteractiveApprover:
    """Shows the Terraform-style summary on stderr and reads one line from stdin."""

    interactive = True

    def approve(self, s: ApprovalSummary) -> bool:
        err.print(Text(f"\nApproval required: {s.action}", style="bold yellow"))
        err.print(f"  target hosts ({len(s.hosts)}): {', '.join(s.hosts)}")
        for a in s.actions:  # "h1: ~ resume from switch" (engine-built, one per host)
            err.print(f"    {a}")
        err.print(f"  bundle sha256: {s.bundle_sha}")
        err.print("  gate evidence from earlier phases:")
        for line in s.evidence or ["(none recorded)"]:
            err.print(f"    {line}")
        err.print("  will change:")
        for c in s.changes:
            err.print(f"    ~ {c}")
        for i, wave in enumerate(s.waves):
            err.print(f"  wave {i + 1}{' (canary)' if i == 0 else ''}: {', '.join(wave)}")
        err.print(f"  to undo: {s.undo}")
        for w in s.warnings:
            err.print(Text(f"  Warning: {w}", style="yellow"))
        err.print(f"  digest: {s.digest}")
        err.print(f"\nDo you want to perform these actions?\n  Only '{APPROVE_WORD}' will be accepted to approve.")
        err.print("  Enter a value: ", end="")
        line = sys.stdin.readline()
        ok = line.rstrip("\n") == APPROVE_WORD
        if not ok:
            err.print(Text("Cancelled: nothing was changed.", style="red"))
        return ok

    def confirm(self, question: str) -> bool:
        err.print(f"{question} [y/N] ", end="")
        return sys.stdin.readline().strip().lower() in ("y", "yes")


def render_facts(found: dict[str, Any]) -> None:
    t = Table(title="toolchain facts")
    for col in ("host", "nvcc", "gpu", "cc", "driver", "torch", "cuda device", "sglang"):
        t.add_column(col.upper(), overflow="fold")
    for host, f in found.items():
        if not f.get("ok"):
            t.add_row(
                host,
                Text(f"unreachable: {f.get('error')}" if f.get("unreachable") else str(f.get("error")), style="red"),
                "",
                "",
                "",
                "",
                "",
                "",
            )
            continue
        gpus = f.get("gpu", {}).get("gpus") or []
        g0 = gpus[0] if gpus else {}
        torch = f.get("torch", {})
        t.add_row(
            host,
            f.get("nvcc", {}).get("version") or "-",
            (f"{len(gpus)}x {g0.get('name')}" if gpus else "-"),
            g0.get("compute_capability") or "-",
            g0.get("driver") or "-",
            torch.get("version") or "-",
            "yes" if torch.get("cuda_available") else "no",
            f.get("sglang", {}).get("version") or "-",
        )
    out.print(t)

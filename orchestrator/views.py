"""Human rendering (Rich) of the engine's typed results, and the interactive approval prompt.

Results go to stdout; progress, warnings, errors and prompts go to stderr.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from orchestrator.specs import PhaseCatalog
from orchestrator.state import RunState

if TYPE_CHECKING:  # the engine is not imported by `status`
    from orchestrator.approval import ApprovalSummary
    from orchestrator.engine import RunReport
    from orchestrator.execution import Event
    from orchestrator.planner import Plan
    from orchestrator.progress import ProgressSink

CONTROLLER = "@local"  # orchestrator.planner.CONTROLLER, repeated to keep `status` lean
APPROVE_WORD = "yes"  # orchestrator.approval.APPROVE_WORD


def _console(stderr: bool) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    wide = None if stream.isatty() else 160  # pipes and CI logs: no 80-column wrapping
    # no markup, highlighting or :emoji: codes: messages carry host names, paths and commands verbatim
    return Console(stderr=stderr, highlight=False, markup=False, emoji=False, soft_wrap=False, width=wide)


out = _console(False)
err = _console(True)

STYLE = {
    "completed": "green",
    "failed": "red",
    "blocked": "yellow",
    "interrupted": "magenta",
    "in_progress": "cyan",
    "awaiting_approval": "bold yellow",
    "skipped": "dim",
    "pending": "white",
}
MARK = {"completed": "✓", "failed": "⨯", "blocked": "!", "interrupted": "↯", "skipped": "-", "in_progress": "…"}


def styled(status: str) -> Text:
    return Text(status, style=STYLE.get(status, ""))


def error_line(message: str, hint: str | None) -> None:
    """``Error: message`` and ``hint: ...`` on stderr, never hard-wrapped: a hint is often a
    command to paste, and a line break inside it would break the paste."""
    err.print(Text("Error: ", style="bold red") + Text(message), soft_wrap=True)
    if hint:
        err.print(Text("hint: ", style="dim") + Text(hint), soft_wrap=True)


class EventRenderer:
    """Renders the engine's ``notify`` events on stderr: phase headers, warnings, rollbacks, and
    each step's start and end through a :class:`~orchestrator.progress.ProgressSink` (a live line
    per host on a terminal, plain start/end lines otherwise; see :mod:`orchestrator.live`).

    The end line is followed by the step's reason and, unless it completed, where its log is."""

    def __init__(self, sink: ProgressSink | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self._sink = sink
        self._clock = clock
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
            self.sink.step_started(*key)
        elif e.kind == "step_finished":
            st = e.status or ""
            with self._mu:
                t0 = self._started.pop(key, None)
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


def on_event(e: Event) -> None:
    """The CLI's ``notify`` callback: one :class:`EventRenderer` per process."""
    global _renderer
    if _renderer is None:
        _renderer = EventRenderer()
    _renderer(e)


def _fmt_metric(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return json.dumps(v) if not isinstance(v, str) else v


def evidence_summary(results: list[Any], limit: int = 8) -> list[str]:
    """``metric=value`` per metric over hosts: the value if all hosts agree, else ``min..max``
    for numbers, else how many distinct values (``summary.`` is dropped from names)."""
    values: dict[str, list[Any]] = {}
    for r in results:
        for k, v in r.metrics.items():
            values.setdefault(k, []).append(v)
    out = []
    for k, vs in list(values.items())[:limit]:
        short = k[len("summary.") :] if k.startswith("summary.") else k
        distinct = {json.dumps(v, sort_keys=True) for v in vs}
        if len(distinct) == 1:
            out.append(f"{short}={_fmt_metric(vs[0])}")
        elif all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vs):
            out.append(f"{short}={_fmt_metric(min(vs))}..{_fmt_metric(max(vs))}")
        else:
            out.append(f"{short}=<{len(distinct)} values>")
    return out


def bundle_summary(rec: Any) -> str:
    """One line about the bundle on the phase's hosts: verified where, uploaded/repaired where."""
    evs = {h: hp.bundle for h, hp in rec.hosts.items() if getattr(hp, "bundle", None) is not None}
    if not evs:
        return ""
    shas = {ev.sha256[:12] for ev in evs.values()}
    ok = [h for h, ev in evs.items() if ev.verified]
    bad = [f"{h} ({ev.last_check or 'not verified'})" for h, ev in evs.items() if not ev.verified]
    up = [h for h, ev in evs.items() if ev.uploaded]
    rep = [h for h, ev in evs.items() if ev.repaired]

    def names(xs: list[str]) -> str:
        return ", ".join(xs) if len(xs) <= 4 else f"{len(xs)} hosts"

    parts = [f"bundle {'/'.join(sorted(shas))} hash-verified on {len(ok)}/{len(evs)} host(s)"]
    parts.append(f"uploaded to {names(up)}" if up else "no upload (already on the hosts)")
    if rep:
        parts.append(f"repaired on {names(rep)}")
    if bad:
        parts.append(f"NOT verified on {names(bad)}")
    return "; ".join(parts)


def render_status(state: RunState, catalog: PhaseCatalog, state_path: str) -> None:
    t = Table(title=f"orchestrator status ({state_path})", show_lines=False, expand=False)
    for col in ("phase", "step", "status", "prio", "hosts", "evidence", "reason"):
        t.add_column(col.upper(), overflow="fold")
    for lp in catalog.phases:
        rec = state.phase(lp.spec.id)
        pst = rec.status.value if rec else "pending"
        hosts = ""
        if rec and len(rec.hosts) <= 4:
            hosts = ", ".join(f"{h}:{hp.status.value}" for h, hp in rec.hosts.items())
        elif rec:  # a fleet: counts per status
            counts: dict[str, int] = {}
            for hp in rec.hosts.values():
                counts[hp.status.value] = counts.get(hp.status.value, 0) + 1
            hosts = " ".join(f"{n} {k}" for k, n in counts.items())
        t.add_row(
            Text(lp.spec.label, style="bold"),
            "",
            styled(pst),
            "",
            hosts,
            bundle_summary(rec) if rec else "",
            (rec.reason or "") if rec else "",
        )
        rollback_ids = {s.id for s in lp.spec.rollback_steps}  # ids are unique in a phase; `in` on models is slow
        for step in list(lp.spec.steps) + list(lp.spec.rollback_steps):
            sr = rec.step(step.id) if rec else None
            is_rb = step.id in rollback_ids
            if is_rb and (sr is None or not sr.hosts):
                continue
            st = sr.status.value if sr else "pending"
            prev = state.phase(lp.spec.requires) if lp.spec.requires is not None else None
            ready = prev is not None and prev.status.value == "completed"
            if (
                step.requires_approval
                and st == "pending"
                and ready
                and (rec is None or rec.status.value != "completed")
            ):
                st = "awaiting_approval"  # shown, not stored: the predecessor passed, this needs `yes`
            step_counts: dict[str, int] = {}
            reasons: list[str] = []
            results = dict(sr.hosts) if sr else {}
            for h, r in results.items():
                step_counts[r.status.value] = step_counts.get(r.status.value, 0) + 1
                if r.reason and len(reasons) < 2:
                    reasons.append(r.reason if len(results) == 1 else f"{h}: {r.reason}")
            ev = evidence_summary(list(results.values()))
            host_txt = " ".join(f"{n} {k}" for k, n in step_counts.items())
            label = f"  {'↺ ' if is_rb else ''}{step.id}" + (" (approval)" if step.requires_approval else "")
            t.add_row("", label, styled(st), step.priority.value, host_txt, ", ".join(ev), "; ".join(reasons))
    out.print(t)
    if state.last_run:
        lr = state.last_run
        out.print(
            Text(
                f"last run {lr.run_id} by {lr.user}@{lr.hostname} started {lr.started_at} "
                f"exit {lr.exit_code if lr.exit_code is not None else '?'}",
                style="dim",
            )
        )


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

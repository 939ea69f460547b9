"""Rich rendering of ``orchestrator status`` and the two consoles every human view prints to.

Kept apart from :mod:`orchestrator.views` (plans, reports, prompts, progress) so that a cold
``orchestrator status`` compiles and runs only this much. Results go to stdout (``out``);
progress, warnings, errors and prompts go to stderr (``err``).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from orchestrator.specs import PhaseCatalog
from orchestrator.state import RunState


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

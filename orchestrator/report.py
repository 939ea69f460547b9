"""What a ``run`` or ``rollback`` did, as the CLI renders it: :class:`RunReport`, its exit code and errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from orchestrator.errors import ExitCode
from orchestrator.invocation import paste_command
from orchestrator.planner import Plan
from orchestrator.records import BAD
from orchestrator.state import PhaseRecord


class RunReport(BaseModel):
    """What a run did: the plan it ran, the phase records it wrote, the exit code and the failures."""

    run_id: str | None = None
    plan: Plan
    phases: list[PhaseRecord] = Field(default_factory=list)
    skipped_phases: list[str] = Field(default_factory=list)
    exit_code: int = 0
    errors: list[dict[str, Any]] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)


def exit_code(report: RunReport) -> int:
    """1 if a host failed or was blocked (4 when every failure was a connection failure), else 0."""
    bad = [h for p in report.phases for h in p.hosts.values() if h.status in BAD]
    if not bad:
        return int(ExitCode.OK)
    if all("unreachable: " in (h.reason or "") for h in bad):
        return int(ExitCode.UNREACHABLE)
    return int(ExitCode.FAILED)


def failure_errors(report: RunReport, state_dir: Path) -> list[dict[str, Any]]:
    """One envelope error per host whose phase failed, was blocked or interrupted."""
    out = []
    for rec in report.phases:
        for h, hp in rec.hosts.items():
            if hp.status in BAD:
                out.append(
                    {
                        "code": hp.status.value.upper(),
                        "exit_code": report.exit_code,
                        "message": hp.reason,
                        "host": h,
                        "phase": f"{rec.id}-{rec.name}",
                        "hint": f"{paste_command('status')}; logs under {state_dir}/runs/{report.run_id}/",
                    }
                )
    return out

"""The one JSON document every ``--json`` command prints on stdout (also on errors).

``{"schema_version": 1, "command": "run", "ok": false, "exit_code": 1, "run_id": "...",
"dry_run": false, "plan": {...} | null, "results": {...} | null, "errors": [{"code", "exit_code",
"message", "hint", "host", "phase", "log"}], "warnings": [...]}``. Keys may be added, never
renamed without bumping ``schema_version``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

ENVELOPE_SCHEMA = 1


class Envelope(BaseModel):
    schema_version: int = ENVELOPE_SCHEMA
    command: str
    ok: bool
    exit_code: int
    run_id: str | None = None
    dry_run: bool = False
    plan: Any = None  # a planner.Plan model or its dict
    results: Any = None
    errors: list[dict[str, Any]] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)

    def dumps(self) -> str:
        """Serialized by pydantic-core (fast for 100-host plans); models inside ``Any`` fields included."""
        return self.model_dump_json(indent=2, fallback=str)

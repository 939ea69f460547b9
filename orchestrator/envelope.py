"""The one JSON document every ``--json`` command prints on stdout (also on errors).

``{"schema_version": 1, "command": "run", "ok": false, "exit_code": 1, "run_id": "...",
"dry_run": false, "plan": {...} | null, "results": {...} | null, "errors": [{"code", "exit_code",
"message", "hint", "host", "phase", "log"}], "warnings": [...]}``. Keys may be added, never
renamed without bumping ``schema_version``.
"""
from __future__ import annotations

import json
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
    plan: dict[str, Any] | None = None
    results: dict[str, Any] | None = None
    errors: list[dict[str, Any]] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)

    def dumps(self) -> str:
        return json.dumps(self.model_dump(mode="json"), indent=2, sort_keys=True, default=str)

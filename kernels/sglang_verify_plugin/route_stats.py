"""Per-backend counters of target-verify calls, shared by both routes (dense: verify_hook's
BundledVerify, DSA: dsa_backend's DsaRouteStats).

Each call is counted once, as bundled (``reason`` None) or declined with its reason: per
captured batch size when it runs inside CUDA-graph capture (what that graph will replay), else
as an eager call. ``on_stats(new)`` is told after every count (``new``: a fact the process
record does not show yet, e.g. a first decline reason) so the record can be flushed early.
Stdlib only; no torch.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from typing import Any

log = logging.getLogger("sglang_verify_plugin")


class RouteCounters:
    """Target-verify calls of one backend: per captured batch size and eager, bundled or declined."""

    def __init__(self) -> None:
        self.on_stats: Callable[[bool], None] | None = None  # told (urgent=True: new fact) on every count
        self.eager_routed = 0
        self.eager_declined = 0
        self.eager_reasons: Counter[str] = Counter()
        self.captured: dict[int, dict[str, Any]] = {}  # batch size -> {"bundled", "declined", "reasons"}

    def count(self, bs: int | None, capturing: bool, reason: str | None) -> bool:
        """Count one call (``bs`` None: unknown batch size, kept as -1); returns whether it was new."""
        new = False
        if capturing:
            key = int(bs) if bs is not None else -1
            entry = self.captured.get(key)
            if entry is None:
                entry = self.captured[key] = {"bundled": 0, "declined": 0, "reasons": Counter()}
                new = True
            if reason is None:
                entry["bundled"] += 1
            else:
                new = new or reason not in entry["reasons"]
                entry["declined"] += 1
                entry["reasons"][reason] += 1
        elif reason is None:
            new = self.eager_routed == 0
            self.eager_routed += 1
        else:
            new = reason not in self.eager_reasons
            self.eager_declined += 1
            self.eager_reasons[reason] += 1
        if self.on_stats is not None:
            try:
                self.on_stats(new)
            except Exception:  # reporting must never break the service
                log.exception("on_stats callback failed")
        return new

    def counters(self) -> dict[str, Any]:
        """``captured`` (per batch size: the kernel that graph replays, calls, reasons) and ``eager``."""
        captured = {
            str(bs): {
                "kernel": "bundled" if e["declined"] == 0 and e["bundled"] > 0 else "sglang",
                "bundled_calls": e["bundled"],
                "declined_calls": e["declined"],
                "reasons": dict(e["reasons"]),
            }
            for bs, e in sorted(dict(self.captured).items())  # one C-level copy: the flusher thread reads
        }
        return {
            "captured": captured,
            "eager": {
                "routed": self.eager_routed,
                "declined": self.eager_declined,
                "reasons": dict(self.eager_reasons),
            },
        }

"""What the SGLang stand-in (tests/support/sglang_standin_server.py) writes for its TP ranks.

STAND-IN, tests only. A real service runs one process per TP rank; each builds its backend
through the plugin and writes ``<root>/active.d/tp<r>.json`` (then re-merges active.json).
The stand-in is one process, so this object plays every rank in turn with the plugin's own
helpers: ``sglang_verify_plugin.config`` (``set_rank``, ``set_stats_provider``,
``record_active``: what the factory calls) and one ``BundledVerify`` per rank for the routing
counters (``count``: what the hook calls per verify call). The records are therefore the
plugin's format, not a copy of it.

Control keys (``<root>/standin_control.json``, read at start and per request):
``tp`` (ranks, default 1); ``captured_bs`` (captured batch sizes, default [1, 2, 4, 8]); and
the modes (``off``/``bundled``/``always``) ``decline_verify`` (every /generate counts one
declined verify call per rank, reason ``decline_reason``, default ``kv dtype fp8_e4m3
unsupported``), ``capture_on_sglang`` (the largest captured batch size is recorded on SGLang's
kernel) and ``rank_missing`` (the last rank writes no record: the plugin did not load there);
``model_family`` (the model the stand-in serves: ``dense_mla``, default, built by SGLang's triton
factory, or ``dsa``, by its dsa factory): as in the plugin, a rank runs the bundled route only
when the config's ``model_family`` names that factory's family (route ``hook``, resp. ``dsa``
with the dsa route's counters); otherwise it records ``stock`` with the reason.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from sglang_verify_plugin import config as plugin_config
from sglang_verify_plugin.dsa_backend import DsaRouteStats
from sglang_verify_plugin.verify_hook import BundledVerify

CAPTURE_DECLINE = "mla_verify.supports() declined the shape"


class StandinRanks:
    def __init__(
        self,
        cfg: plugin_config.VerifyConfig,
        env: Mapping[str, str],
        active: Callable[[str], bool],
        control: Callable[[], dict[str, Any]],
    ) -> None:
        self.cfg, self.env, self.active, self.control = cfg, dict(env), active, control
        self.lock = threading.RLock()
        self.dirty = False
        self.flusher: threading.Thread | None = None
        ctl = control()
        self.tp = max(1, int(ctl.get("tp", 1) or 1))
        served = str(ctl.get("model_family") or "dense_mla")
        self.reason = cfg.reason
        if not cfg.bundled:
            self.route = "stock"
        elif (cfg.model_family or "dense_mla") != served:
            self.route = "stock"
            self.reason = f"{cfg.reason}, model_family={cfg.model_family or 'dense_mla'}: not the {served} route"
        else:
            self.route = "dsa" if served == "dsa" else "hook"
        self.bundled = self.route != "stock"
        self.ranks: list[Any] = [
            DsaRouteStats()
            if self.route == "dsa"
            else BundledVerify(kernel_loader=lambda: None, library_loader=lambda d: {})
            for _ in range(self.tp)
        ]
        if self.bundled:
            sizes = [int(b) for b in ctl.get("captured_bs", [1, 2, 4, 8])]
            on_sglang = active("capture_on_sglang")
            for bv in self.ranks:  # CUDA-graph capture at start: one call per captured batch size
                for bs in sizes:
                    self._count(bv, bs, True, CAPTURE_DECLINE if on_sglang and bs == max(sizes) else None)

    @staticmethod
    def _count(bv: Any, bs: int | None, capturing: bool, reason: str | None) -> None:
        bv.count(bs, capturing, reason)  # both routes keep sglang_verify_plugin.route_stats.RouteCounters

    def write_records(self) -> None:
        """Each rank's record and the merge, as each rank's process would write them."""
        if self.active("plugin_missing"):
            return
        with self.lock:
            n = self.tp - 1 if self.active("rank_missing") else self.tp
            for r in range(n):
                plugin_config.reset_process_record()
                plugin_config.set_rank(r, self.tp)
                if self.bundled:
                    plugin_config.set_stats_provider("target", self.ranks[r].stats)
                cfg = self.cfg
                if not self.bundled:
                    cfg = plugin_config.VerifyConfig("stock", cfg.bundle_sha, cfg.defrag, self.reason)
                plugin_config.record_active(cfg, self.env, route=self.route, standin=True)

    def verify_calls(self) -> None:
        """One eager target-verify call per rank for a /generate (declined if the control says so).

        Like the plugin, the request path only counts; a background thread writes the records
        within FLUSH_INTERVAL_S (the canary waits that long), so requests pay no file I/O."""
        if not self.bundled:
            return
        reason = str(self.control().get("decline_reason") or "kv dtype fp8_e5m2 unsupported")
        declined = self.active("decline_verify")
        with self.lock:
            for bv in self.ranks:
                self._count(bv, None, False, reason if declined else None)
            self.dirty = True
            if self.flusher is None:
                self.flusher = threading.Thread(target=self._flush_loop, name="standin-records", daemon=True)
                self.flusher.start()

    def _flush_loop(self) -> None:
        while True:
            time.sleep(plugin_config.FLUSH_INTERVAL_S / 2)
            if self.dirty:
                self.dirty = False
                self.write_records()

"""The plugin's configuration: ``verify_backend.json`` and the kill switch.

Read once when a process builds its attention backend ("at start"). The file lives at
``ORCHESTRATOR_VERIFY_CONFIG`` (``<remote_root>/verify_backend.json`` on a host) and holds
``{"verify_kernel": "bundled"|"stock", "bundle_sha": ..., "defrag": false, "model_family": ...}``:
``model_family`` (``dense_mla``, the default, or ``dsa``) says which route the cut-over enabled:
the ``triton`` factory serves ``dense_mla``, the ``dsa`` factory serves ``dsa``; the other one
stays SGLang's own.
``ORCHESTRATOR_VERIFY_DISABLE=1`` forces the stock Triton path whatever the file says.
Stdlib only: imported by the SGLang plugin and by ``cutover_agent``.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CONFIG_ENV = "ORCHESTRATOR_VERIFY_CONFIG"
DISABLE_ENV = "ORCHESTRATOR_VERIFY_DISABLE"
ROOT_ENV = "ORCHESTRATOR_VERIFY_ROOT"
CONFIG_NAME = "verify_backend.json"
ACTIVE_NAME = "active.json"  # the merge of every service process's record (what really runs)
ACTIVE_DIR = "active.d"  # one record per service process (TP rank): <key>.json
FLUSH_INTERVAL_S = 0.5  # a process's routing counters reach its record within this many seconds
#: active.json routes on which a rank's target verify runs the bundled kernel, per model family.
ROUTES_BY_FAMILY = {"dense_mla": ("hook", "forward_extend"), "dsa": ("dsa",)}
ACTIVE_ROUTES = tuple(r for routes in ROUTES_BY_FAMILY.values() for r in routes)
VERIFY_KERNELS = ("bundled", "stock")
MODEL_FAMILIES = tuple(ROUTES_BY_FAMILY)


class ConfigError(ValueError):
    """``verify_backend.json`` is unreadable or holds a value of the wrong type."""


@dataclass(frozen=True)
class VerifyConfig:
    """What the plugin should do in this process, and why."""

    verify_kernel: str  # "bundled" or "stock"
    bundle_sha: str | None
    defrag: bool
    reason: str  # one line: where the decision came from
    extra: Mapping[str, Any] = field(default_factory=dict)
    model_family: str | None = None  # None: dense_mla (configs written before the dsa route)

    @property
    def bundled(self) -> bool:
        return self.verify_kernel == "bundled"


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def validate(doc: Any) -> dict[str, Any]:
    """Check a config document's known keys; return it. Raises ConfigError naming the key."""
    if not isinstance(doc, dict):
        raise ConfigError(f"{CONFIG_NAME}: expected a JSON object, got {type(doc).__name__}")
    vk = doc.get("verify_kernel", "stock")
    if vk not in VERIFY_KERNELS:
        raise ConfigError(f"{CONFIG_NAME}: verify_kernel must be one of {VERIFY_KERNELS}, got {vk!r}")
    sha = doc.get("bundle_sha")
    if sha is not None and not isinstance(sha, str):
        raise ConfigError(f"{CONFIG_NAME}: bundle_sha must be a string or null, got {sha!r}")
    if not isinstance(doc.get("defrag", False), bool):
        raise ConfigError(f"{CONFIG_NAME}: defrag must be true or false, got {doc.get('defrag')!r}")
    fam = doc.get("model_family")
    if fam is not None and fam not in MODEL_FAMILIES:
        raise ConfigError(f"{CONFIG_NAME}: model_family must be one of {MODEL_FAMILIES} or null, got {fam!r}")
    return doc


def read_config_file(path: Path) -> dict[str, Any]:
    """Parse and validate ``path``; ``{}`` when it does not exist."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from exc
    try:
        return validate(json.loads(text))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from exc


def config_path(environ: Mapping[str, str] | None = None) -> Path | None:
    """``ORCHESTRATOR_VERIFY_CONFIG``, else ``$ORCHESTRATOR_VERIFY_ROOT/verify_backend.json``."""
    env = os.environ if environ is None else environ
    if env.get(CONFIG_ENV):
        return Path(env[CONFIG_ENV])
    if env.get(ROOT_ENV):
        return Path(env[ROOT_ENV]) / CONFIG_NAME
    return None


def load_config(environ: Mapping[str, str] | None = None) -> VerifyConfig:
    """Decide bundled vs stock for this process. Fails safe: any doubt means stock."""
    env = os.environ if environ is None else environ
    if _truthy(env.get(DISABLE_ENV)):
        return VerifyConfig("stock", None, False, f"kill switch {DISABLE_ENV}=1")
    path = config_path(env)
    if path is None:
        return VerifyConfig("stock", None, False, f"{CONFIG_ENV} is not set")
    try:
        doc = read_config_file(path)
    except ConfigError as exc:
        return VerifyConfig("stock", None, False, f"unusable config: {exc}")
    if not doc:
        return VerifyConfig("stock", None, False, f"{path} does not exist")
    known = {"verify_kernel", "bundle_sha", "defrag", "model_family"}
    return VerifyConfig(
        verify_kernel=doc.get("verify_kernel", "stock"),
        bundle_sha=doc.get("bundle_sha"),
        defrag=bool(doc.get("defrag", False)),
        reason=f"{path}: verify_kernel={doc.get('verify_kernel', 'stock')}",
        extra={k: v for k, v in doc.items() if k not in known},
        model_family=doc.get("model_family"),
    )


def fsync_dir(path: Path) -> None:
    """fsync a directory so a rename inside it survives a crash (best effort)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_json(path: Path, doc: Any) -> None:
    """Write ``doc`` as JSON to ``path`` via a temp file in the same folder, fsync, rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=2, sort_keys=True)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    fsync_dir(path.parent)


DEFRAG_NOT_WIRED = (
    "the KV defragmenter hook is not installed in an SGLang scheduler in this process "
    "(it attaches at the scheduler's first step; see kernels/sglang_verify_plugin/defrag_hook.py)"
)

# ----------------------------------------------------------------------------- per-process record
#
# Every SGLang process that builds an attention backend through the plugin (each TP rank's
# scheduler process; the draft runner's backends live in the same process as its target's)
# writes ``<dir>/active.d/<rank>.json``: which backend each role built, and per target-verify
# route what it captured and ran. It then merges every record of the folder into
# ``active.json`` under a file lock, so no process overwrites another's facts.

_PROCESS_STARTED_AT = time.time()  # the plugin is imported while the service process starts
# What the defrag hook (defrag_hook.py) reports for this process; merged into its record.
_DEFRAG_STATUS: dict[str, Any] = {}
# The target backend's verify fields this process last recorded (empty: no backend built here).
_LAST_ACTIVE: dict[str, Any] = {}
_RANK: dict[str, Any] = {}  # tp_rank, tp_size, pp_rank, dp_rank of this process
_BACKENDS: dict[str, dict[str, Any]] = {}  # role ("target", "draft") -> what it built
_STATS: dict[str, Any] = {}  # role -> callable returning that backend's routing counters
_TARGET: dict[str, Any] = {}  # "environ": the environment the record was first written with
_LOCK = threading.RLock()
_FLUSH: dict[str, Any] = {}


def set_defrag_status(**fields: Any) -> None:
    """Replace this process's defrag status (``defrag_applied`` and details)."""
    _DEFRAG_STATUS.clear()
    _DEFRAG_STATUS.update(fields)


def defrag_status() -> dict[str, Any]:
    return dict(_DEFRAG_STATUS)


def _defrag_fields(requested: bool) -> dict[str, Any]:
    if not requested:
        return {"defrag_requested": False, "defrag_applied": False, "defrag_note": None}
    if _DEFRAG_STATUS:
        return {"defrag_requested": True, "defrag_applied": False, "defrag_note": None, **_DEFRAG_STATUS}
    return {"defrag_requested": True, "defrag_applied": False, "defrag_note": DEFRAG_NOT_WIRED}


def rank_key(tp_rank: int | None = None, pp_rank: int | None = None, dp_rank: int | None = None) -> str:
    """``tp0``, ``pp1-tp0``, ``dp2-tp1``: the record name of one service process; ``pid<N>`` if unknown."""
    if tp_rank is None:
        return f"pid{os.getpid()}"
    parts = []
    if pp_rank:
        parts.append(f"pp{pp_rank}")
    if dp_rank is not None:
        parts.append(f"dp{dp_rank}")
    parts.append(f"tp{tp_rank}")
    return "-".join(parts)


def set_rank(tp_rank: int | None, tp_size: int | None = None, pp_rank: int | None = None, dp_rank: int | None = None):
    """Say which rank this process is (the backend factory does, from SGLang's parallel context)."""
    with _LOCK:
        _RANK.update(tp_rank=tp_rank, tp_size=tp_size, pp_rank=pp_rank or 0, dp_rank=dp_rank)


def set_stats_provider(role: str, provider: Any) -> None:
    """``provider()`` returns the routing counters of ``role``'s backend (read by the flusher)."""
    with _LOCK:
        _STATS[role] = provider


def reset_process_record() -> None:
    """Forget this process's record (tests build many backends in one process)."""
    with _LOCK:
        _RANK.clear()
        _BACKENDS.clear()
        _STATS.clear()
        _LAST_ACTIVE.clear()
        _TARGET.clear()


def rank_document() -> dict[str, Any]:
    """This process's record: rank, verify fields of its target backend, every role, defrag."""
    with _LOCK:
        rank = dict(_RANK) or {"tp_rank": None, "tp_size": None, "pp_rank": 0, "dp_rank": None}
        key = rank_key(rank.get("tp_rank"), rank.get("pp_rank"), rank.get("dp_rank"))
        if _LAST_ACTIVE:
            base = {k: v for k, v in _LAST_ACTIVE.items() if k != "_defrag_requested"}
            requested = bool(_LAST_ACTIVE.get("_defrag_requested"))
        else:
            base = {
                "verify_kernel": None,
                "bundle_sha": None,
                "route": None,
                "reason": "the attention backend was not built by the plugin in this process",
            }
            requested = False
        requested = requested or bool(_DEFRAG_STATUS) or bool(_TARGET.get("defrag_requested"))
        backends = {}
        for role, entry in _BACKENDS.items():
            entry = dict(entry)
            provider = _STATS.get(role)
            if provider is not None:
                try:
                    entry["verify"] = provider()
                except Exception as exc:  # reporting never breaks serving
                    entry["verify"] = {"error": f"{type(exc).__name__}: {exc}"}
            backends[role] = entry
        return {
            **base,
            "rank": key,
            **rank,
            "pid": os.getpid(),
            "started_at": _PROCESS_STARTED_AT,
            "written_at": time.time(),
            "flush_interval_s": FLUSH_INTERVAL_S,
            "backends": backends,
            **_defrag_fields(requested),
        }


def _active_dir(environ: Mapping[str, str] | None) -> Path | None:
    path = config_path(environ if environ is not None else _TARGET.get("environ"))
    return None if path is None else path.parent


def write_rank(doc: dict[str, Any], folder: Path) -> Path:
    """Write one process's record into ``folder/active.d`` and re-merge ``folder/active.json``."""
    atomic_write_json(folder / ACTIVE_DIR / f"{doc['rank']}.json", doc)
    return merge_active(folder)


def _write_process_record(environ: Mapping[str, str] | None) -> Path | None:
    if environ is not None and "environ" not in _TARGET:
        _TARGET["environ"] = dict(environ)
    folder = _active_dir(environ)
    if folder is None:
        return None
    try:
        with _LOCK:  # build and write as one step: a later write always carries newer counters
            return write_rank(rank_document(), folder)
    except OSError:
        return None


def read_ranks(folder: Path) -> dict[str, dict[str, Any]]:
    """Every record in ``folder/active.d`` (unreadable ones as ``{"error": ...}``)."""
    out: dict[str, dict[str, Any]] = {}
    d = Path(folder) / ACTIVE_DIR
    try:
        names = sorted(p for p in d.iterdir() if p.suffix == ".json" and not p.name.startswith("."))
    except FileNotFoundError:
        return out
    for p in names:
        try:
            doc = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            doc = {"rank": p.stem, "error": f"unreadable: {exc}"}
        out[p.stem] = doc if isinstance(doc, dict) else {"rank": p.stem, "error": "not a JSON object"}
    return out


def rank_inactive_reason(doc: dict[str, Any]) -> str | None:
    """Why this rank's target verify is not on the bundled kernel (None: it is)."""
    if doc.get("error"):
        return doc["error"]
    if doc.get("verify_kernel") != "bundled" or doc.get("route") not in ACTIVE_ROUTES:
        return f"verify_kernel {doc.get('verify_kernel')} (route {doc.get('route')}): {doc.get('reason')}"
    verify = (doc.get("backends") or {}).get("target", {}).get("verify") or {}
    if verify.get("static_decline"):
        return f"declined: {verify['static_decline']}"
    if verify.get("kernel_error"):
        return f"kernel unavailable: {verify['kernel_error']}"
    return None


def route_family(route: Any) -> str | None:
    """``dsa`` for the dsa route, ``dense_mla`` for the triton routes, None for stock/declined/none."""
    for family, routes in ROUTES_BY_FAMILY.items():
        if route in routes:
            return family
    return None


def aggregate(ranks: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``active.json``: every rank's record plus what holds for all of them (never last-writer-wins)."""
    docs = [ranks[k] for k in sorted(ranks)]

    def common(field: str, default: Any = None) -> Any:
        vals = {json.dumps(d.get(field), sort_keys=True) for d in docs}
        return docs[0].get(field) if len(vals) == 1 else default

    inactive = {k: why for k, d in sorted(ranks.items()) if (why := rank_inactive_reason(d))}
    missing = []
    groups: dict[tuple, set] = {}
    for d in docs:
        if isinstance(d.get("tp_rank"), int) and isinstance(d.get("tp_size"), int):
            groups.setdefault((d.get("pp_rank") or 0, d.get("dp_rank"), d["tp_size"]), set()).add(d["tp_rank"])
    for (pp, dp, size), have in sorted(groups.items(), key=str):
        missing += [rank_key(r, pp, dp) for r in range(size) if r not in have]
    eager_routed = eager_declined = 0
    reasons: dict[str, int] = {}
    captured: dict[str, list[int]] = {}
    not_bundled = []
    for k, d in sorted(ranks.items()):
        verify = (d.get("backends") or {}).get("target", {}).get("verify") or {}
        eager = verify.get("eager") or {}
        eager_routed += int(eager.get("routed") or 0)
        eager_declined += int(eager.get("declined") or 0)
        for why, n in (eager.get("reasons") or {}).items():
            reasons[why] = reasons.get(why, 0) + int(n)
        cap = verify.get("captured") or {}
        captured[k] = sorted(int(bs) for bs in cap)
        for bs, c in sorted(cap.items(), key=lambda kv: int(kv[0])):
            if c.get("kernel") != "bundled":
                not_bundled.append({"rank": k, "bs": int(bs), "reasons": c.get("reasons") or {}})
    all_active = bool(docs) and not inactive and not missing
    doc: dict[str, Any] = {
        "schema": 2,
        "verify_kernel": common("verify_kernel", "mixed"),
        "bundle_sha": common("bundle_sha"),
        "route": common("route", "mixed"),
        # which bundled route every rank runs: dense_mla | dsa; "mixed" or None (not bundled) otherwise
        "route_family": _common_family(docs),
        "reason": next(iter(inactive.values()), None) if inactive else common("reason"),
        "pid": docs[0].get("pid") if len(docs) == 1 else None,
        "pids": sorted(d.get("pid") for d in docs if d.get("pid") is not None),
        "written_at": max((float(d.get("written_at") or 0) for d in docs), default=0.0),
        "oldest_written_at": min((float(d.get("written_at") or 0) for d in docs), default=0.0),
        "ranks_total": len(docs),
        "ranks_active": sorted(k for k in ranks if k not in inactive),
        "ranks_inactive": inactive,
        "ranks_missing": missing,
        "all_ranks_active": all_active,
        "eager_routed": eager_routed,
        "eager_declined": eager_declined,
        "declined_reasons": reasons,
        "captured_batch_sizes": captured,
        "captured_not_bundled": not_bundled,
        "flush_interval_s": max((float(d.get("flush_interval_s") or 0) for d in docs), default=FLUSH_INTERVAL_S),
        "ranks": ranks,
    }
    if len(docs) == 1:
        doc.update({k: v for k, v in docs[0].items() if k.startswith("defrag_")})
    else:
        req = [d for d in docs if d.get("defrag_requested")]
        doc["defrag_requested"] = bool(req)
        doc["defrag_applied"] = bool(req) and all(d.get("defrag_applied") for d in req)
        doc["defrag_note"] = next((f"{d.get('rank')}: {d['defrag_note']}" for d in req if d.get("defrag_note")), None)
        for field in ("defrag_runs", "defrag_tokens_moved", "defrag_bytes_moved", "defrag_skipped_overlap"):
            doc[field] = sum(int(d.get(field) or 0) for d in req)
    return doc


def _common_family(docs: list[dict[str, Any]]) -> str | None:
    families = {route_family(d.get("route")) for d in docs}
    if len(families) != 1:
        return "mixed" if docs else None
    return families.pop()


def _alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def merge_active(folder: Path) -> Path:
    """Re-merge ``folder/active.json`` from every record, under an exclusive lock."""
    import fcntl

    folder = Path(folder)
    (folder / ACTIVE_DIR).mkdir(parents=True, exist_ok=True)
    with open(folder / ACTIVE_DIR / ".lock", "a+") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            ranks = read_ranks(folder)
            for key, doc in list(ranks.items()):
                # A record named by pid (rank unknown) of a process that is gone is stale: drop it.
                # Rank-named records are overwritten by the next start of that rank instead.
                if key.startswith("pid") and not _alive(doc.get("pid")):
                    (folder / ACTIVE_DIR / f"{key}.json").unlink(missing_ok=True)
                    del ranks[key]
            atomic_write_json(folder / ACTIVE_NAME, aggregate(ranks))
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
    return folder / ACTIVE_NAME


def record_active(
    cfg: VerifyConfig, environ: Mapping[str, str] | None = None, *, role: str = "target", **extra: Any
) -> Path | None:
    """Record what this service process built for ``role`` and re-merge ``active.json``.

    The cut-over canary compares it with ``verify_backend.json``, so a plugin that never loaded
    (wrong attention backend, import error) cannot pass for the bundled kernel. Never raises.
    ``defrag_applied`` is true only once the defrag hook has run in a real scheduler in
    this process (:func:`set_defrag_status`); otherwise ``defrag_note`` says why not.
    """
    entry = {"verify_kernel": cfg.verify_kernel, "bundle_sha": cfg.bundle_sha, "reason": cfg.reason, **extra}
    with _LOCK:
        _BACKENDS[role] = entry
        if role == "target":
            _LAST_ACTIVE.clear()
            _LAST_ACTIVE.update(entry)
            _LAST_ACTIVE["_defrag_requested"] = cfg.defrag
    path = _write_process_record(environ)
    start_flusher()
    return path


def record_defrag(requested: bool = True, environ: Mapping[str, str] | None = None) -> Path | None:
    """Rewrite this process's record with its current defrag status. Never raises."""
    with _LOCK:
        if requested:
            _TARGET["defrag_requested"] = True
    return _write_process_record(environ)


def flush(environ: Mapping[str, str] | None = None) -> Path | None:
    """Write this process's record now (the routing counters changed)."""
    _FLUSH.pop("dirty", None)
    return _write_process_record(environ)


def mark_dirty(urgent: bool = False) -> None:
    """The routing counters changed: the flusher writes them within FLUSH_INTERVAL_S (now if urgent)."""
    _FLUSH["dirty"] = True
    if urgent:
        ev = _FLUSH.get("event")
        if ev is not None:
            ev.set()


def start_flusher() -> None:
    """A daemon thread that writes this process's record when its counters changed."""
    if _FLUSH.get("thread") is not None:
        return
    ev = threading.Event()

    def loop() -> None:
        while True:
            ev.wait(FLUSH_INTERVAL_S)
            ev.clear()
            if _FLUSH.get("dirty"):
                try:
                    flush()
                except Exception:  # noqa: BLE001 - reporting never breaks serving
                    pass

    t = threading.Thread(target=loop, name="sglang-verify-plugin-record", daemon=True)
    _FLUSH.update(thread=t, event=ev)
    t.start()

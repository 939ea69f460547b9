"""Host-side cut-over verbs for the SGLang verify kernel (plans/0001 section 5).

Run ON the host, one verb per call, each printing one JSON document with ``--json``::

    python -m cutover_agent stage      --root R --service-python P [--target DIR]
    python -m cutover_agent baseline   --root R --generate-url U [--health-url H] [--for SHA]
    python -m cutover_agent switch     --root R --to SHA [--model-family dense_mla|dsa]
    python -m cutover_agent restart    --restart-json J --health-url H [--health-timeout S]
    python -m cutover_agent health     --health-url H [--health-timeout S]
    python -m cutover_agent canary     --root R --generate-url U [--max-latency-ratio X]
    python -m cutover_agent rollback   --root R [--restart-json J --health-url H]
    python -m cutover_agent set-config --root R KEY=VALUE [KEY=VALUE ...]

Layout under ``R`` (the host's remote_root): ``bundles/<sha>/`` (with ``.sha256``),
``current`` and ``previous`` (relative symlinks ``bundles/<sha>``, replaced atomically),
``verify_backend.json`` (read by the plugin at service start), ``baseline.json``, and what the
service processes recorded: ``active.d/<rank>.json`` (one per TP rank) merged into ``active.json``
(the canary gates on every rank, declined verify calls during its prompts and captured sizes).
Exit codes: 0 ok, 1 a check failed, 2 usage, 75 blocked (cannot run here).
Stdlib only; never imports ``orchestrator``.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sglang_verify_plugin.config import (
    ACTIVE_NAME,
    CONFIG_NAME,
    MODEL_FAMILIES,
    ROUTES_BY_FAMILY,
    ConfigError,
    atomic_write_json,
    fsync_dir,
    read_config_file,
    route_family,
    validate,
)
from tool_contract import EXIT_FAILED, EXIT_OK, EXIT_USAGE, emit

SHA_RE = re.compile(r"^[0-9a-f]{64}$")
BASELINE_NAME = "baseline.json"
#: Same as the inventory's ``service.health_timeout_s`` default; phases pass the host's own value
#: once the engine offers it as a placeholder.
DEFAULT_HEALTH_TIMEOUT_S = 600.0
LOADER_DIR = Path(__file__).resolve().parents[1] / "sglang_verify_plugin" / "service_package"
LOADER_DIST = "orchestrator-mla-verify-loader"
LOADER_VERSION = "1.0.0"
LOADER_MODULE = "mla_verify_loader"
LOADER_ENTRY_POINT = "orchestrator_mla_verify = mla_verify_loader:load"
PLUGIN_GROUP = "sglang.srt.plugins"

#: The fixed canary prompt set: short, varied, deterministic under greedy decoding.
CANARY_PROMPTS: tuple[str, ...] = (
    "The capital of France is",
    "def fibonacci(n):",
    "List three prime numbers greater than 100:",
    "Translate to German: The weather is nice today.",
    "In one sentence, what does a KV cache store?",
    "1, 1, 2, 3, 5, 8,",
    "The opposite of 'speculative' is",
    "Write a haiku about attention kernels.",
)


class UsageError(Exception):
    """Bad arguments: exit 2, nothing changed."""


class CheckFailed(Exception):
    """The verb ran and its check failed: exit 1."""


# ----------------------------------------------------------------------------- pointers


def _pointer(root: Path, name: str) -> str | None:
    """The bundle sha a ``current``/``previous`` symlink points at, or None."""
    try:
        target = os.readlink(root / name)
    except (FileNotFoundError, OSError):
        return None
    return target.rstrip("/").rsplit("/", 1)[-1] or None


def _set_pointer(root: Path, name: str, sha: str) -> None:
    """Atomically make ``root/name`` a symlink to ``bundles/<sha>`` (symlink + rename)."""
    tmp = root / f".{name}.tmp.{os.getpid()}"
    try:
        tmp.unlink()
    except FileNotFoundError:
        pass
    os.symlink(f"bundles/{sha}", tmp)
    os.replace(tmp, root / name)
    fsync_dir(root)


def _check_bundle(root: Path, sha: str) -> None:
    if not SHA_RE.match(sha):
        raise UsageError(f"--to: {sha!r} is not a 64-character lowercase sha256 hex digest")
    marker = root / "bundles" / sha / ".sha256"
    try:
        recorded = marker.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        raise CheckFailed(f"bundle {sha[:12]} is not unpacked under {root}/bundles (no .sha256)") from None
    if recorded != sha:
        raise CheckFailed(f"bundles/{sha[:12]}/.sha256 says {recorded[:12]!r}, not {sha[:12]}")
    if not (root / "bundles" / sha / "sglang_verify_plugin").is_dir():
        raise CheckFailed(f"bundles/{sha[:12]} has no sglang_verify_plugin/ package")


def _read_config(root: Path) -> dict[str, Any]:
    try:
        return dict(read_config_file(root / CONFIG_NAME))
    except ConfigError as exc:
        raise CheckFailed(str(exc)) from None


# ----------------------------------------------------------------------------- HTTP


def _http(url: str, body: dict | None, timeout_s: float) -> tuple[int, bytes]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="GET" if body is None else "POST")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:  # noqa: S310 (http only)
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read() if exc.fp else b""


def check_health(url: str, timeout_s: float) -> dict[str, Any]:
    """One GET of the health URL: healthy means HTTP 200 within ``timeout_s``."""
    started = time.monotonic()
    try:
        status, raw = _http(url, None, timeout_s)
    except (OSError, ValueError) as exc:
        return {
            "healthy": False,
            "error": f"{type(exc).__name__}: {exc}",
            "elapsed_s": round(time.monotonic() - started, 3),
        }
    out: dict[str, Any] = {
        "healthy": status == 200,
        "status": status,
        "elapsed_s": round(time.monotonic() - started, 3),
    }
    try:
        body = json.loads(raw.decode() or "null")
        if isinstance(body, dict):
            out["body"] = body
    except (UnicodeDecodeError, json.JSONDecodeError):
        pass
    return out


def wait_healthy(url: str, timeout_s: float, poll_s: float = 0.5) -> dict[str, Any]:
    """Poll ``url`` until healthy or ``timeout_s`` passes; report attempts and wait."""
    started = time.monotonic()
    deadline = started + timeout_s
    attempts = 0
    last: dict[str, Any] = {"healthy": False, "error": "not polled"}
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        attempts += 1
        last = check_health(url, max(0.2, min(5.0, remaining)))
        if last["healthy"]:
            break
        time.sleep(min(poll_s, max(0.0, deadline - time.monotonic())))
    return {**last, "attempts": attempts, "waited_s": round(time.monotonic() - started, 3), "timeout_s": timeout_s}


def generate(url: str, prompt: str, max_new_tokens: int, timeout_s: float) -> dict[str, Any]:
    """One greedy completion through SGLang's native ``/generate`` API."""
    body = {"text": prompt, "sampling_params": {"temperature": 0, "max_new_tokens": max_new_tokens}}
    started = time.monotonic()
    try:
        status, raw = _http(url, body, timeout_s)
    except (OSError, ValueError) as exc:
        return {"prompt": prompt, "error": f"{type(exc).__name__}: {exc}"}
    latency = time.monotonic() - started
    if status != 200:
        return {"prompt": prompt, "error": f"HTTP {status}", "latency_s": round(latency, 4)}
    try:
        doc = json.loads(raw.decode())
    except (UnicodeDecodeError, json.JSONDecodeError):
        return {"prompt": prompt, "error": "response is not JSON", "latency_s": round(latency, 4)}
    if isinstance(doc, list) and doc:
        doc = doc[0]
    if not isinstance(doc, dict) or ("output_ids" not in doc and "text" not in doc):
        return {"prompt": prompt, "error": "response has neither output_ids nor text", "latency_s": round(latency, 4)}
    return {
        "prompt": prompt,
        "output_ids": doc.get("output_ids"),
        "text": doc.get("text"),
        "latency_s": round(latency, 6),
    }


def _same_output(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Token-for-token when both have ``output_ids``, else the exact text."""
    if a.get("output_ids") is not None and b.get("output_ids") is not None:
        return list(a["output_ids"]) == list(b["output_ids"])
    return a.get("text") is not None and a.get("text") == b.get("text")


# ----------------------------------------------------------------------------- verbs


def verb_switch(args: argparse.Namespace) -> dict[str, Any]:
    """Point ``current`` at ``bundles/<sha>`` (old one kept as ``previous``); config bundled for
    the route of ``--model-family`` (``dense_mla``: SGLang's triton backend, ``dsa``: its dsa one)."""
    root = _root(args)
    sha = args.to
    _check_bundle(root, sha)
    before = _pointer(root, "current")
    changed = before != sha
    if changed:
        if before is not None:
            _set_pointer(root, "previous", before)
        _set_pointer(root, "current", sha)
    cfg = _read_config(root)
    cfg.update({"verify_kernel": "bundled", "bundle_sha": sha, "model_family": args.model_family})
    cfg.setdefault("defrag", False)
    cfg.pop("rolled_back_from", None)
    atomic_write_json(root / CONFIG_NAME, validate(cfg))
    return {
        "ok": True,
        "changed": changed,
        "current": sha,
        "previous": _pointer(root, "previous"),
        "model_family": args.model_family,
        "config": cfg,
    }


def verb_set_config(args: argparse.Namespace) -> dict[str, Any]:
    """Set KEY=VALUE pairs in ``verify_backend.json`` atomically (VALUE parsed as JSON)."""
    root = _root(args)
    updates: dict[str, Any] = {}
    for pair in args.pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"set-config: {pair!r} is not KEY=VALUE")
        if key not in ("verify_kernel", "bundle_sha", "defrag", "model_family") and not re.match(
            r"^defrag_[a-z0-9_]+$", key
        ):
            raise UsageError(
                f"set-config: unknown key {key!r} (verify_kernel, bundle_sha, defrag, model_family, defrag_*)"
            )
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        if isinstance(value, (dict, list)):
            raise UsageError(f"set-config: {key} must be a scalar, got {raw!r}")
        updates[key] = value
    cfg = _read_config(root)
    before = dict(cfg)
    cfg.update(updates)
    try:
        validate(cfg)
    except ConfigError as exc:
        raise UsageError(f"set-config: {exc}") from None
    if cfg != before or not (root / CONFIG_NAME).exists():
        atomic_write_json(root / CONFIG_NAME, cfg)
    return {"ok": True, "changed": cfg != before, "config": cfg}


def verb_health(args: argparse.Namespace) -> dict[str, Any]:
    res = wait_healthy(args.health_url, args.health_timeout, args.poll)
    return {"ok": res["healthy"], **res}


def _parse_restart(raw: str) -> list[str]:
    try:
        argv = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--restart-json: not valid JSON ({exc.msg})") from None
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        raise UsageError("--restart-json: expected a non-empty JSON list of strings")
    return argv


def _restart(argv: list[str], timeout_s: float) -> dict[str, Any]:
    started = time.monotonic()
    try:
        proc = subprocess.run(
            argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except FileNotFoundError:
        return {"restart_rc": None, "restart_error": f"{argv[0]}: not found"}
    except subprocess.TimeoutExpired:
        return {"restart_rc": None, "restart_error": f"restart command ran past {timeout_s}s"}
    return {
        "restart_rc": proc.returncode,
        "restart_s": round(time.monotonic() - started, 3),
        "restart_stderr_tail": proc.stderr[-400:],
    }


def verb_restart(args: argparse.Namespace) -> dict[str, Any]:
    """Run the inventory's restart argv, then wait for health within the timeout."""
    argv = _parse_restart(args.restart_json)
    out = _restart(argv, args.restart_timeout)
    if out.get("restart_rc") != 0:
        return {"ok": False, "healthy": False, **out}
    res = wait_healthy(args.health_url, args.health_timeout, args.poll)
    return {"ok": res["healthy"], **out, **res}


def _run_prompts(url: str, prompts: list[str], max_new_tokens: int, timeout_s: float) -> list[dict]:
    return [generate(url, p, max_new_tokens, timeout_s) for p in prompts]


def _median_latency(outputs: list[dict]) -> float | None:
    vals = [o["latency_s"] for o in outputs if "error" not in o and "latency_s" in o]
    return statistics.median(vals) if vals else None


def verb_baseline(args: argparse.Namespace) -> dict[str, Any]:
    """Record health and greedy completions of the prompt set into ``<root>/baseline.json``."""
    root = _root(args)
    path = root / BASELINE_NAME
    if args.for_sha:
        if not SHA_RE.match(args.for_sha):
            raise UsageError(f"--for: {args.for_sha!r} is not a sha256 hex digest")
        if _pointer(root, "current") == args.for_sha:
            # Already switched (a resumed run): a baseline now would measure the new kernel.
            existing = _load_baseline(path) if path.exists() else None
            if existing and existing.get("for_sha") == args.for_sha:
                return {"ok": True, "reused": True, "prompts": len(existing["outputs"]), "path": str(path)}
            raise CheckFailed(
                f"current already points at {args.for_sha[:12]} and no baseline was "
                "recorded before the switch; roll back first"
            )
    health = check_health(args.health_url, args.request_timeout) if args.health_url else None
    if health is not None and not health["healthy"]:
        raise CheckFailed(f"service is not healthy before the cut-over: {health.get('error') or health.get('status')}")
    outputs = _run_prompts(args.generate_url, list(CANARY_PROMPTS), args.max_new_tokens, args.request_timeout)
    errors = [o for o in outputs if "error" in o]
    doc = {
        "schema": 1,
        "recorded_at": time.time(),
        "for_sha": args.for_sha,
        "generate_url": args.generate_url,
        "max_new_tokens": args.max_new_tokens,
        "config": _read_config(root),
        "health": health,
        "outputs": outputs,
        "latency_s_median": _median_latency(outputs),
    }
    if errors:
        raise CheckFailed(f"{len(errors)} of {len(outputs)} baseline prompts failed: {errors[0]['error']}")
    atomic_write_json(path, doc)
    return {
        "ok": True,
        "reused": False,
        "prompts": len(outputs),
        "errors": 0,
        "latency_s_median": doc["latency_s_median"],
        "healthy": health["healthy"] if health else None,
        "path": str(path),
    }


def _load_baseline(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckFailed(f"no baseline at {path}: run the baseline verb before the switch") from None
    except json.JSONDecodeError as exc:
        raise CheckFailed(f"{path}: not valid JSON ({exc.msg})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("outputs"), list) or not doc["outputs"]:
        raise CheckFailed(f"{path}: has no recorded outputs")
    return doc


def _read_active(root: Path) -> dict | None:
    """``active.json`` as a dict, or None when absent or unreadable."""
    try:
        doc = json.loads((root / ACTIVE_NAME).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return doc if isinstance(doc, dict) else None


def _ranks(active: dict | None) -> dict[str, dict]:
    """Per-rank records of an ``active.json`` (one pseudo-rank for a record without ``ranks``)."""
    if not active:
        return {}
    ranks = active.get("ranks")
    if isinstance(ranks, dict):
        return {k: v for k, v in ranks.items() if isinstance(v, dict)}
    return {"process": active}


def _target_verify(rank: dict) -> dict:
    return ((rank.get("backends") or {}).get("target") or {}).get("verify") or {}


def _declined_by_rank(active: dict | None) -> dict[str, int]:
    return {k: int((_target_verify(r).get("eager") or {}).get("declined") or 0) for k, r in _ranks(active).items()}


def verb_canary(args: argparse.Namespace) -> dict[str, Any]:
    """Run the baseline prompts again; compare token for token; latency ratio of medians.

    With a bundled config it also gates on what every service process recorded (active.json,
    merged from ``active.d/<rank>.json``): every rank on the bundled kernel, no target-verify
    call declined while the canary prompts ran (counters read before and after, after one
    flush interval), every captured batch size on the bundled kernel.
    """
    root = _root(args)
    base = _load_baseline(root / BASELINE_NAME)
    prompts = [o["prompt"] for o in base["outputs"]]
    max_new = int(base.get("max_new_tokens") or args.max_new_tokens)
    before = _read_active(root)
    outputs = _run_prompts(args.generate_url, prompts, max_new, args.request_timeout)
    errors = sum(1 for o in outputs if "error" in o)
    mismatched = [b["prompt"] for b, c in zip(base["outputs"], outputs) if "error" not in c and not _same_output(b, c)]
    identical = errors == 0 and not mismatched
    b_med, c_med = base.get("latency_s_median"), _median_latency(outputs)
    ratio = round(c_med / b_med, 4) if b_med and c_med is not None else None
    reasons = []
    if errors:
        reasons.append(f"{errors} request(s) failed")
    if mismatched:
        reasons.append(f"{len(mismatched)} output(s) differ from the baseline")
    if args.max_latency_ratio is not None and (ratio is None or ratio > args.max_latency_ratio):
        reasons.append(f"latency ratio {ratio} above the bound {args.max_latency_ratio}")
    health = check_health(args.health_url, args.request_timeout) if args.health_url else None
    if health is not None and not health["healthy"]:
        reasons.append("service unhealthy after the canary prompts")
    # Each process flushes its counters within flush_interval_s of a change: wait that long twice.
    flush_s = float((before or {}).get("flush_interval_s") or 0.5)
    time.sleep(min(10.0, 2 * flush_s + 0.2))
    kernel_active, active, why = _kernel_active(root)
    cfg = _read_config(root)
    if kernel_active is False:
        reasons.append(f"the service is not running the bundled kernel: {why}")
    routing = _routing(before, active) if kernel_active is not None else {}
    if kernel_active is not None:
        if routing["declined_verify_calls"]:
            reasons.append(
                f"{routing['declined_verify_calls']} target-verify call(s) declined during the canary: "
                f"{routing['declined_during_canary']}"
            )
        if routing["captured_sizes_not_bundled"]:
            reasons.append(f"captured batch sizes not on the bundled kernel: {routing['captured_not_bundled']}")
    return {
        "ok": not reasons,
        "kernel_active": kernel_active,
        # the family the cut-over enabled, and the bundled route every rank records (or mixed/None)
        "model_family": cfg.get("model_family") or "dense_mla",
        "route_family": _route_family(active),
        "active": active,
        "ranks_total": routing.get("ranks_total"),
        "ranks_all_active": None if kernel_active is None else kernel_active is True,
        "declined_verify_calls": routing.get("declined_verify_calls"),
        "declined_during_canary": routing.get("declined_during_canary"),
        "captured_sizes_not_bundled": routing.get("captured_sizes_not_bundled"),
        "captured_not_bundled": routing.get("captured_not_bundled"),
        "outputs_identical": identical,
        "mismatched_prompts": mismatched,
        "errors": errors,
        "prompts": len(prompts),
        "latency_ratio": ratio,
        "latency_s_baseline_median": b_med,
        "latency_s_canary_median": c_med,
        "healthy": None if health is None else health["healthy"],
        "service": None if health is None else health.get("body"),
        "reasons": reasons,
    }


def _route_family(active: dict | None) -> str | None:
    """``dense_mla`` / ``dsa`` when every rank records that family's bundled route, else
    ``mixed`` (ranks differ) or None (no rank on a bundled route)."""
    ranks = _ranks(active)
    families = {route_family(r.get("route")) for r in ranks.values()}
    if not ranks or families == {None}:
        return None
    return families.pop() if len(families) == 1 else "mixed"


def _routing(before: dict | None, after: dict | None) -> dict[str, Any]:
    """Per-rank routing facts for the canary gates: declined calls while it ran, captures."""
    ranks = _ranks(after)
    start = _declined_by_rank(before)
    delta: dict[str, dict[str, Any]] = {}
    for key, rank in ranks.items():
        eager = _target_verify(rank).get("eager") or {}
        n = int(eager.get("declined") or 0)
        # A record that restarted (new pid) counts from zero; one absent before counts whole.
        old_pid = (_ranks(before).get(key) or {}).get("pid")
        d = n - (start.get(key, 0) if old_pid == rank.get("pid") else 0)
        if d > 0:
            delta[key] = {"declined": d, "reasons": eager.get("reasons") or {}}
    not_bundled = []
    for key, rank in sorted(ranks.items()):
        for bs, c in sorted((_target_verify(rank).get("captured") or {}).items(), key=lambda kv: int(kv[0])):
            if c.get("kernel") != "bundled":
                not_bundled.append({"rank": key, "bs": int(bs), "reasons": c.get("reasons") or {}})
    return {
        "ranks_total": len(ranks),
        "declined_verify_calls": sum(v["declined"] for v in delta.values()),
        "declined_during_canary": delta,
        "captured_sizes_not_bundled": len(not_bundled),
        "captured_not_bundled": not_bundled,
    }


def _kernel_active(root: Path) -> tuple[bool | None, dict | None, str]:
    """Did every restarted service process build the bundled backend the config asks for?

    None when the config does not ask for it. Each service process writes its record
    (``active.d/<rank>.json``) when it builds its attention backend, merged into ``active.json``;
    every rank must be on the bundled kernel, none missing (ranks 0..tp_size-1), each naming
    the configured bundle and written after the config (by a process started after the switch).
    """
    cfg_path = root / CONFIG_NAME
    cfg = _read_config(root)
    if cfg.get("verify_kernel") != "bundled":
        return None, None, "config is not bundled"
    try:
        active = json.loads((root / ACTIVE_NAME).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return (
            False,
            None,
            f"no {ACTIVE_NAME}: the plugin did not build the backend (not loaded, or SGLang built a backend the plugin does not replace)",
        )
    except (OSError, json.JSONDecodeError) as exc:
        return False, None, f"{ACTIVE_NAME} unreadable ({exc})"
    if not isinstance(active, dict):
        return False, None, f"{ACTIVE_NAME} is not a JSON object"
    ranks = _ranks(active)
    if not ranks:
        return False, active, f"{ACTIVE_NAME} holds no rank record"
    mtime = cfg_path.stat().st_mtime
    family = cfg.get("model_family") or "dense_mla"
    routes = ROUTES_BY_FAMILY.get(family, ())
    for key, rank in sorted(ranks.items()):
        label = "" if key == "process" else f"rank {key}: "
        if rank.get("verify_kernel") != "bundled" or rank.get("route") not in routes:
            return (
                False,
                active,
                f"{label}{ACTIVE_NAME} says {rank.get('verify_kernel')} (route {rank.get('route')}; the {family} "
                f"cut-over needs route {' or '.join(routes)}): {rank.get('reason')}",
            )
        if rank.get("bundle_sha") != cfg.get("bundle_sha"):
            return (
                False,
                active,
                f"{label}{ACTIVE_NAME} names bundle {str(rank.get('bundle_sha'))[:12]}, "
                f"config {str(cfg.get('bundle_sha'))[:12]}",
            )
        if float(rank.get("written_at") or 0) < mtime:
            return False, active, f"{label}{ACTIVE_NAME} is older than the switch: the service was not restarted"
    inactive = active.get("ranks_inactive") or {}
    if inactive:
        return False, active, f"ranks not on the bundled kernel: {inactive}"
    if active.get("ranks_missing"):
        return False, active, f"ranks without a record (the plugin did not load there): {active['ranks_missing']}"
    return True, active, "ok"


def verb_rollback(args: argparse.Namespace) -> dict[str, Any]:
    """``current`` back to ``previous``, config stock, restart, health."""
    root = _root(args)
    cur, prev = _pointer(root, "current"), _pointer(root, "previous")
    if args.from_sha and cur != args.from_sha and _read_config(root).get("bundle_sha") != args.from_sha:
        # This host was never switched to that bundle (a halted rollout): nothing to undo.
        out = {
            "ok": True,
            "rolled_back": False,
            "current": cur,
            "previous": prev,
            "reason": f"not switched to {args.from_sha[:12]}; left as it is",
        }
        if args.health_url:
            res = check_health(args.health_url, min(args.health_timeout, 10.0))
            out.update(ok=res["healthy"], healthy=res["healthy"])
        return out
    if prev is not None and cur != prev:
        _check_bundle(root, prev)
        _set_pointer(root, "current", prev)
    elif prev is None and cur is not None:
        # First cut-over on this host: before it there was no ``current`` at all.
        (root / "current").unlink()
        fsync_dir(root)
    cfg = _read_config(root)
    if cfg.get("verify_kernel") == "bundled" and cfg.get("bundle_sha"):
        cfg["rolled_back_from"] = cfg["bundle_sha"]
    cfg.update({"verify_kernel": "stock", "bundle_sha": prev})
    cfg.setdefault("defrag", False)
    atomic_write_json(root / CONFIG_NAME, validate(cfg))
    out: dict[str, Any] = {
        "rolled_back": True,
        "current": _pointer(root, "current"),
        "previous": prev,
        "from": cur,
        "config": cfg,
    }
    if not args.restart_json:
        return {"ok": True, "restarted": False, **out}
    if not args.health_url:
        raise UsageError("rollback: --restart-json needs --health-url")
    out.update(_restart(_parse_restart(args.restart_json), args.restart_timeout))
    if out.get("restart_rc") != 0:
        return {"ok": False, "restarted": False, "healthy": False, **out}
    res = wait_healthy(args.health_url, args.health_timeout, args.poll)
    return {"ok": res["healthy"], "restarted": True, **out, **res}


def _probe_script() -> str:
    return (
        "import json, importlib.metadata as m\n"
        f"eps = [e for e in m.entry_points(group={PLUGIN_GROUP!r}) if e.dist and e.dist.name == {LOADER_DIST!r}]\n"
        "print(json.dumps([{'name': e.name, 'value': e.value, 'version': e.dist.version} for e in eps]))\n"
    )


def build_loader_wheel(source: Path, out_dir: Path, root: Path) -> Path:
    """Pack the loader package (``root.json`` baked in) as a py3-none-any wheel, stdlib only.

    Built here rather than by pip from source so the service environment needs pip alone (no
    setuptools/wheel, no network). Name, version and entry point are the ones its
    pyproject.toml declares (a test keeps them equal).
    """
    pkg = source / LOADER_MODULE
    if not (pkg / "__init__.py").is_file():
        raise CheckFailed(f"{source}: no {LOADER_MODULE}/__init__.py (the plugin's service package)")
    dist_info = f"{LOADER_DIST.replace('-', '_')}-{LOADER_VERSION}.dist-info"
    files: dict[str, bytes] = {
        f"{LOADER_MODULE}/__init__.py": (pkg / "__init__.py").read_bytes(),
        f"{LOADER_MODULE}/root.json": (json.dumps({"remote_root": str(root)}, indent=2) + "\n").encode(),
        f"{dist_info}/METADATA": (
            f"Metadata-Version: 2.1\nName: {LOADER_DIST}\nVersion: {LOADER_VERSION}\n"
            "Summary: Loads the orchestrator's bundled MLA verify kernel into SGLang\n"
        ).encode(),
        f"{dist_info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: cutover_agent\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{dist_info}/entry_points.txt": f"[{PLUGIN_GROUP}]\n{LOADER_ENTRY_POINT}\n".encode(),
        f"{dist_info}/top_level.txt": f"{LOADER_MODULE}\n".encode(),
    }
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append(f"{dist_info}/RECORD,,")
    files[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()
    wheel = out_dir / f"{LOADER_DIST.replace('-', '_')}-{LOADER_VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), data)
    return wheel


def verb_stage(args: argparse.Namespace) -> dict[str, Any]:
    """pip install --no-deps the loader wheel (root baked in) into the service python."""
    root = _root(args)
    py = args.service_python
    if shutil.which(py) is None and not os.access(py, os.X_OK):
        raise CheckFailed(f"--service-python {py}: not found or not executable")
    with tempfile.TemporaryDirectory(prefix="mla-verify-stage-") as tmp:
        wheel = build_loader_wheel(Path(args.package_dir), Path(tmp), root)
        cmd = [
            py,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-index",
            "--force-reinstall",
            "--disable-pip-version-check",
            "--no-input",
            "-q",
        ]
        if args.target:
            cmd += ["--target", args.target, "--upgrade"]
        cmd.append(str(wheel))
        try:
            proc = subprocess.run(
                cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=args.pip_timeout, check=False
            )
        except subprocess.TimeoutExpired:
            raise CheckFailed(f"pip install ran past {args.pip_timeout}s") from None
        if proc.returncode != 0:
            lines = (proc.stderr + proc.stdout).strip().splitlines()
            tail = [ln.strip() for ln in lines if "error" in ln.lower()][-2:] or lines[-2:]
            raise CheckFailed(f"pip install into {py} failed (exit {proc.returncode}): {' | '.join(tail)}")
    env = dict(os.environ)
    if args.target:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [args.target, env.get("PYTHONPATH")]))
    check = subprocess.run(
        [py, "-c", _probe_script()],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    try:
        eps = json.loads(check.stdout.strip().splitlines()[-1]) if check.returncode == 0 else []
    except (json.JSONDecodeError, IndexError):
        eps = []
    if not eps:
        raise CheckFailed(f"after install, {py} lists no {PLUGIN_GROUP} entry point of {LOADER_DIST}")
    return {"ok": True, "service_python": py, "target": args.target, "entry_points": eps, "remote_root": str(root)}


# ----------------------------------------------------------------------------- CLI


def _root(args: argparse.Namespace) -> Path:
    root = Path(args.root)
    if not root.is_absolute():
        raise UsageError(f"--root: {args.root!r} is not an absolute path")
    if not root.is_dir():
        raise UsageError(f"--root: {args.root} is not a directory")
    return root


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m cutover_agent", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="verb", required=True)

    def verb(name: str, fn: Callable, help_: str, root: bool = True) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help_)
        sp.set_defaults(fn=fn)
        sp.add_argument("--json", action="store_true", help="print one JSON document")
        if root:
            sp.add_argument("--root", required=True, help="the host's remote_root (absolute)")
        return sp

    def health_opts(sp: argparse.ArgumentParser, required: bool) -> None:
        sp.add_argument("--health-url", required=required)
        sp.add_argument(
            "--health-timeout",
            type=float,
            default=DEFAULT_HEALTH_TIMEOUT_S,
            help="seconds to wait for health (a large model loads for minutes)",
        )
        sp.add_argument("--poll", type=float, default=0.5, help="seconds between health polls")

    def restart_opts(sp: argparse.ArgumentParser, required: bool) -> None:
        sp.add_argument("--restart-json", required=required, help="the restart argv as a JSON list")
        sp.add_argument("--restart-timeout", type=float, default=120.0)

    def gen_opts(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--generate-url", required=True)
        sp.add_argument("--max-new-tokens", type=int, default=32)
        sp.add_argument("--request-timeout", type=float, default=60.0)

    sp = verb("stage", verb_stage, "install the plugin loader into the service python")
    sp.add_argument("--service-python", required=True)
    sp.add_argument("--target", help="pip --target folder instead of the interpreter's site-packages")
    sp.add_argument("--package-dir", default=str(LOADER_DIR), help=argparse.SUPPRESS)
    sp.add_argument("--pip-timeout", type=float, default=300.0)

    sp = verb("baseline", verb_baseline, "record health and greedy outputs before the switch")
    gen_opts(sp)
    sp.add_argument("--health-url")
    sp.add_argument("--for", dest="for_sha", help="the bundle sha about to be switched to")

    sp = verb("switch", verb_switch, "point current at bundles/<sha>, config bundled")
    sp.add_argument("--to", required=True, help="bundle sha256")
    sp.add_argument(
        "--model-family",
        choices=MODEL_FAMILIES,
        default="dense_mla",
        help="the route to enable: dense_mla (SGLang's triton backend) or dsa (its dsa backend)",
    )

    sp = verb("restart", verb_restart, "run the restart argv, wait for health", root=False)
    restart_opts(sp, True)
    health_opts(sp, True)

    sp = verb("health", verb_health, "wait for the service to be healthy", root=False)
    health_opts(sp, True)

    sp = verb("canary", verb_canary, "compare greedy outputs with the baseline")
    gen_opts(sp)
    sp.add_argument("--health-url")
    sp.add_argument(
        "--max-latency-ratio", type=float, default=None, help="fail when canary/baseline median latency exceeds this"
    )

    sp = verb("rollback", verb_rollback, "previous current, config stock, restart, health")
    sp.add_argument(
        "--from", dest="from_sha", help="the bundle being rolled back; a host not switched to it is left alone"
    )
    restart_opts(sp, False)
    health_opts(sp, False)

    sp = verb("set-config", verb_set_config, "edit verify_backend.json atomically")
    sp.add_argument("pairs", nargs="+", metavar="KEY=VALUE")
    return p


def _emit(doc: dict[str, Any], as_json: bool) -> None:
    emit(doc, as_json, human=_print_verb, indent=None, sort_keys=True, default=str)


def _print_verb(doc: dict[str, Any]) -> None:
    status = "ok" if doc.get("ok") else "FAILED"
    print(f"{doc.get('verb')}: {status}")
    for key in ("error", "healthy", "outputs_identical", "latency_ratio", "rolled_back", "current", "changed"):
        if key in doc:
            print(f"  {key}: {doc[key]}")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        if exc.code and "--json" in argv:
            print(
                json.dumps(
                    {
                        "ok": False,
                        "usage": True,
                        "verb": argv[0] if argv else None,
                        "error": "invalid arguments (argparse's message is on stderr)",
                    }
                )
            )
        return EXIT_USAGE if exc.code else EXIT_OK
    as_json = bool(getattr(args, "json", False))
    try:
        doc = args.fn(args)
        code = EXIT_OK if doc.get("ok") else EXIT_FAILED
    except UsageError as exc:
        doc, code = {"ok": False, "error": str(exc), "usage": True}, EXIT_USAGE
    except CheckFailed as exc:
        doc, code = {"ok": False, "error": str(exc)}, EXIT_FAILED
    doc = {"verb": args.verb, **doc}
    _emit(doc, as_json)
    if code == EXIT_USAGE and not as_json:
        print(f"error: {doc['error']}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())

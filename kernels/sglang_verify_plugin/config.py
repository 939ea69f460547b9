"""The plugin's configuration: ``verify_backend.json`` and the kill switch.

Read once when a process builds its attention backend ("at start"). The file lives at
``ORCHESTRATOR_VERIFY_CONFIG`` (``<remote_root>/verify_backend.json`` on a host) and holds
``{"verify_kernel": "bundled"|"stock", "bundle_sha": ..., "defrag": false}``.
``ORCHESTRATOR_VERIFY_DISABLE=1`` forces the stock Triton path whatever the file says.
Stdlib only: imported by the SGLang plugin and by ``cutover_agent``.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CONFIG_ENV = "ORCHESTRATOR_VERIFY_CONFIG"
DISABLE_ENV = "ORCHESTRATOR_VERIFY_DISABLE"
ROOT_ENV = "ORCHESTRATOR_VERIFY_ROOT"
CONFIG_NAME = "verify_backend.json"
ACTIVE_NAME = "active.json"  # written by the service when it builds its backend (what really runs)
VERIFY_KERNELS = ("bundled", "stock")


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
    known = {"verify_kernel", "bundle_sha", "defrag"}
    return VerifyConfig(
        verify_kernel=doc.get("verify_kernel", "stock"),
        bundle_sha=doc.get("bundle_sha"),
        defrag=bool(doc.get("defrag", False)),
        reason=f"{path}: verify_kernel={doc.get('verify_kernel', 'stock')}",
        extra={k: v for k, v in doc.items() if k not in known},
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

# What the defrag hook (kernels/sglang_verify_plugin/defrag_hook.py) reports for this process; merged
# into every active.json this process writes. Empty until the hook attaches or fails to.
_DEFRAG_STATUS: dict[str, Any] = {}
# The last active.json document this process wrote through record_active (without defrag
# fields), so that record_defrag can rewrite it with new defrag fields.
_LAST_ACTIVE: dict[str, Any] = {}


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


def _write_active(doc: dict[str, Any], environ: Mapping[str, str] | None) -> Path | None:
    path = config_path(environ)
    if path is None:
        return None
    target = path.parent / ACTIVE_NAME
    try:
        atomic_write_json(target, doc)
    except OSError:
        return None
    return target


def record_active(cfg: VerifyConfig, environ: Mapping[str, str] | None = None, **extra: Any) -> Path | None:
    """Write ``active.json`` beside the config: what this service process actually built.

    The cut-over canary compares it with ``verify_backend.json``, so a plugin that never loaded
    (wrong attention backend, import error) cannot pass for the bundled kernel. Never raises.
    ``defrag_applied`` is true only once the defrag hook has attached to a real scheduler in
    this process (:func:`set_defrag_status`); otherwise ``defrag_note`` says why not.
    """
    import time

    base = {
        "verify_kernel": cfg.verify_kernel,
        "bundle_sha": cfg.bundle_sha,
        "reason": cfg.reason,
        "pid": os.getpid(),
        **extra,
    }
    _LAST_ACTIVE.clear()
    _LAST_ACTIVE.update(base)
    _LAST_ACTIVE["_defrag_requested"] = cfg.defrag
    doc = {**base, "written_at": time.time(), **_defrag_fields(cfg.defrag)}
    return _write_active(doc, environ)


def record_defrag(requested: bool = True, environ: Mapping[str, str] | None = None) -> Path | None:
    """Rewrite ``active.json`` with this process's current defrag status (after the hook
    attached, ran, or was disabled). Keeps the verify fields this process last wrote; when it
    wrote none (the plugin did not build the attention backend here) it says so instead of
    claiming a kernel. Never raises."""
    import time

    if _LAST_ACTIVE:
        base = {k: v for k, v in _LAST_ACTIVE.items() if k != "_defrag_requested"}
        requested = bool(_LAST_ACTIVE.get("_defrag_requested", requested)) or requested
    else:
        base = {
            "verify_kernel": None,
            "bundle_sha": None,
            "route": None,
            "pid": os.getpid(),
            "reason": "the attention backend was not built by the plugin in this process",
        }
    doc = {**base, "pid": os.getpid(), "written_at": time.time(), **_defrag_fields(requested)}
    return _write_active(doc, environ)

"""The plugin's configuration: ``verify_backend.json`` and the kill switch.

Read once when a process builds its attention backend ("at start"). The file lives at
``ORCHESTRATOR_VERIFY_CONFIG`` (``<remote_root>/verify_backend.json`` on a host) and holds
``{"verify_kernel": "bundled"|"stock", "bundle_sha": ..., "defrag": false}``.
``ORCHESTRATOR_VERIFY_DISABLE=1`` forces the stock Triton path whatever the file says.
Stdlib only: imported by the SGLang plugin and by ``kernels.cutover``.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

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


DEFRAG_NOT_WIRED = "the KV defragmenter is not wired into the SGLang scheduler yet (kernels/RESULTS-defrag.md, known limits)"


def record_active(cfg: VerifyConfig, environ: Mapping[str, str] | None = None, **extra: Any) -> Path | None:
    """Write ``active.json`` beside the config: what this service process actually built.

    The cut-over canary compares it with ``verify_backend.json``, so a plugin that never loaded
    (wrong attention backend, import error) cannot pass for the bundled kernel. Never raises.
    """
    import time

    path = config_path(environ)
    if path is None:
        return None
    doc = {"verify_kernel": cfg.verify_kernel, "bundle_sha": cfg.bundle_sha, "reason": cfg.reason,
           "pid": os.getpid(), "written_at": time.time(),
           # The defragmenter (kernels.defrag) is validated and measured by phase 4, but no hook
           # runs it inside SGLang's scheduler yet: say so, so that enabling it cannot pass a canary.
           "defrag_requested": cfg.defrag, "defrag_applied": False,
           "defrag_note": DEFRAG_NOT_WIRED if cfg.defrag else None, **extra}
    target = path.parent / ACTIVE_NAME
    try:
        atomic_write_json(target, doc)
    except OSError:
        return None
    return target

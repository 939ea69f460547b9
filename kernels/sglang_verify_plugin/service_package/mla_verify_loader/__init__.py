"""Entry point (group ``sglang.srt.plugins``) that loads the active bundle's SGLang plugin.

SGLang calls :func:`load` in every process it starts (``load_plugins()``). It finds the
host's remote_root (``ORCHESTRATOR_VERIFY_ROOT``, else the folder of
``ORCHESTRATOR_VERIFY_CONFIG``, else ``root.json`` written here by ``cutover_agent
stage``), puts the resolved ``<root>/current`` first on ``sys.path`` and calls
``sglang_verify_plugin.register()`` from that bundle. No ``current``, a foreign
``sglang_verify_plugin`` module already imported, or any error: SGLang keeps its stock
backend, and the reason is logged. Nothing here imports a top-level module named
``kernels`` (that name belongs to Hugging Face's ``kernels``, which SGLang imports).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path

log = logging.getLogger("mla_verify_loader")

ROOT_ENV = "ORCHESTRATOR_VERIFY_ROOT"
CONFIG_ENV = "ORCHESTRATOR_VERIFY_CONFIG"
CONFIG_NAME = "verify_backend.json"


def find_root() -> Path | None:
    """The host's remote_root, or None when nothing says where it is."""
    if os.environ.get(ROOT_ENV):
        return Path(os.environ[ROOT_ENV])
    if os.environ.get(CONFIG_ENV):
        return Path(os.environ[CONFIG_ENV]).parent
    try:
        doc = json.loads((Path(__file__).parent / "root.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    root = doc.get("remote_root") if isinstance(doc, dict) else None
    return Path(root) if isinstance(root, str) and root else None


def load() -> bool:
    """Register the active bundle's plugin; False (stock SGLang) when it cannot."""
    root = find_root()
    if root is None:
        log.warning("no %s, %s or root.json: bundled verify kernel not loaded", ROOT_ENV, CONFIG_ENV)
        return False
    os.environ.setdefault(CONFIG_ENV, str(root / CONFIG_NAME))
    current = root / "current"
    if not current.is_dir():
        log.info("%s does not exist: stock SGLang verify", current)
        return False
    bundle = os.path.realpath(current)
    loaded = sys.modules.get("sglang_verify_plugin")
    if loaded is not None:
        origin = os.path.realpath(getattr(loaded, "__file__", None) or "")
        if not origin.startswith(bundle + os.sep):
            log.error("a different 'sglang_verify_plugin' module is already imported (%s): plugin not loaded", origin)
            return False
    if bundle not in sys.path:
        sys.path.insert(0, bundle)
    from sglang_verify_plugin import register

    ok = register()
    log.info("bundle %s: plugin %s", os.path.basename(bundle)[:12], "registered" if ok else "NOT registered")
    return ok

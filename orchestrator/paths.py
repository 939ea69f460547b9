"""Where things live: the checkout root (holds ``kernels/``, ``phases/``, ``inventory/``)."""

from __future__ import annotations

import os
from pathlib import Path


def project_root() -> Path:
    """The checkout root: ``ORCHESTRATOR_ROOT`` if set, else the parent of this package."""
    env = os.environ.get("ORCHESTRATOR_ROOT")
    return Path(env).resolve() if env else Path(__file__).resolve().parent.parent


def bundle_source(root: Path | None = None) -> Path:
    """``<root>/kernels``: the bundle's sources, and the working directory of every tool run
    on a local host (the unpacked bundle is the same tree on a remote one)."""
    return (root or project_root()) / "kernels"


def default_state_dir() -> Path:
    """``ORCHESTRATOR_STATE_DIR`` or ``.orchestrator/`` in the working directory."""
    return Path(os.environ.get("ORCHESTRATOR_STATE_DIR") or ".orchestrator")


def default_inventory() -> Path:
    """``ORCHESTRATOR_INVENTORY`` or the embedded ``inventory/local.yaml``."""
    env = os.environ.get("ORCHESTRATOR_INVENTORY")
    return Path(env) if env else project_root() / "inventory" / "local.yaml"

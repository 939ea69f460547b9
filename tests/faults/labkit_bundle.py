"""A bundle big enough to fill a small filesystem (incompressible payload)."""

from __future__ import annotations

import os
from pathlib import Path

from orchestrator.bundle import Bundle
from tests.support.bundles import bundle_from


def big_bundle(tmp: Path, payload_bytes: int) -> Bundle:
    files = {"__init__.py": "", "data/blob.bin": os.urandom(payload_bytes)}
    return bundle_from(tmp / "src-big", files, "*.py\ndata/*.bin\n", tmp / "bundles")

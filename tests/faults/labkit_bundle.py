"""A bundle big enough to fill a small filesystem (incompressible payload)."""

from __future__ import annotations

import os
from pathlib import Path

from orchestrator.bundle import Bundle, build_bundle


def big_bundle(tmp: Path, payload_bytes: int) -> Bundle:
    src = tmp / "src-big"
    (src / "kernels" / "data").mkdir(parents=True, exist_ok=True)
    (src / "kernels" / "__init__.py").write_text("")
    (src / "kernels" / "data" / "blob.bin").write_bytes(os.urandom(payload_bytes))
    (src / "kernels" / "MANIFEST").write_text("*.py\ndata/*.bin\n")
    return build_bundle(src, tmp / "bundles")

"""Where the checkout's parts are, for tests and the scripts beside them."""

from __future__ import annotations

from pathlib import Path

#: The checkout root (holds orchestrator/, kernels/, phases/, inventory/).
REPO = Path(__file__).resolve().parents[2]
#: The bundle's sources: the import root and working directory of every host tool.
KERNELS = REPO / "kernels"

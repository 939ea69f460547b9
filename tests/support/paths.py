"""Where the checkout's parts are, for tests and the scripts beside them."""

from __future__ import annotations

from pathlib import Path

#: The checkout root (holds orchestrator/, kernels/, phases/, inventory/).
REPO = Path(__file__).resolve().parents[2]
#: The bundle's sources: the import root and working directory of every host tool.
KERNELS = REPO / "kernels"


def copy_kernels(checkout: Path) -> Path:
    """A frozen copy of this checkout's ``kernels/`` at ``checkout/kernels`` (no caches or build
    outputs), so edits made to the shared tree while a test runs cannot change its bundle."""
    import shutil

    return Path(
        shutil.copytree(
            KERNELS,
            checkout / "kernels",
            dirs_exist_ok=True,
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", "*.o", "build", ".*"),
        )
    )

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


#: The loader package the stage step pip-installs into the service python (an entry point of
#: SGLang's plugin group; it is not importable from ``kernels/``).
SERVICE_LOADER = KERNELS / "sglang_verify_plugin" / "service_package" / "mla_verify_loader" / "__init__.py"


def load_service_loader(name: str):
    """A fresh copy of the service loader module (:data:`SERVICE_LOADER`) imported as ``name``,
    not entered in ``sys.modules``, so each test gets its own module state."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, SERVICE_LOADER)
    assert spec is not None and spec.loader is not None, SERVICE_LOADER
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

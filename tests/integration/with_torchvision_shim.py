"""Run a module as __main__ with the CPU torchvision shim installed (CPU test machines only).

Usage: python tests/integration/with_torchvision_shim.py MODULE [ARGS...]
PyPI's torchvision 0.28 is a CUDA build; on a CPU-only torch its import fails ("operator
torchvision::nms does not exist") and SGLang's server_args imports it. torchvision_cpu_shim.py
turns those fake-op registrations into no-ops (see its docstring). A GPU host needs none of this.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__.splitlines()[2])
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import torchvision_cpu_shim

    torchvision_cpu_shim.install()
    module, sys.argv = sys.argv[1], sys.argv[1:]
    runpy.run_module(module, run_name="__main__", alter_sys=True)

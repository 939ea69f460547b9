"""Run a module as __main__ with the sgl_kernel import shim installed (GPU test machine only).

Usage: python tests/integration/with_sgl_kernel_shim.py MODULE [ARGS...]
e.g.   python tests/integration/with_sgl_kernel_shim.py sglang_verify_plugin.defrag_gpu_check --json
The device image has no sgl_kernel (373 MB, not carried); sglang's scheduler modules import it at
module level. The shim (sgl_kernel_import_shim.py) serves the import names and raises if anything
calls into it, so a check that ran through it did not use sgl_kernel.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__.splitlines()[2])
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import sgl_kernel_import_shim

    sgl_kernel_import_shim.install()
    module, sys.argv = sys.argv[1], sys.argv[1:]
    runpy.run_module(module, run_name="__main__", alter_sys=True)

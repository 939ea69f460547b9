"""Session-wide setup that must happen before any test module imports Triton.

On a machine without CUDA, Triton kernels (SGLang's index kernels in tests/integration, the
defrag executor's) can only run in Triton's interpreter, and ``TRITON_INTERPRET=1`` only takes
effect for ``@triton.jit`` functions decorated after it is set. tests/integration/conftest.py
used to set it just before SGLang's first import; a run that imported Triton earlier (e.g.
``pytest tests/kernels tests/integration``) then left half the jit functions compiled-mode and
24 plugin tests failed with "Cannot call @triton.jit'd outside of the scope of a kernel". So it
is set here, once, before collection. A CUDA machine is left as it is.

Also: a suite started with SIGINT ignored (``bash .ci/run &`` from a script, whose background jobs
POSIX shells start with SIGINT and SIGQUIT ignored) would pass that on to every CLI it spawns, and
the Ctrl-C tests would then send a signal the CLI never sees (session 41's run: three failures).
Those tests specify what the CLI does on Ctrl-C in a terminal, so the suite restores Python's
handler here; the children then start with the default disposition (exec resets handlers).
"""

from __future__ import annotations

import os
import signal


def _set_triton_interpreter_without_cuda() -> None:
    if "TRITON_INTERPRET" in os.environ:
        return
    try:
        import torch
    except ImportError:  # no torch: nothing here runs Triton either
        return
    if not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"


_set_triton_interpreter_without_cuda()


def _deliver_sigint_to_spawned_clis() -> None:
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


_deliver_sigint_to_spawned_clis()

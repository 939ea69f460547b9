"""Let PyPI's CUDA build of torchvision import beside a CPU-only torch (tests only).

PyPI's torchvision wheel registers fake (meta) kernels for ``torchvision::nms`` and
friends; on a CPU-only torch its ``_C`` extension cannot load, the operators do not
exist, and the registration raises "operator torchvision::nms does not exist". SGLang
reaches torchvision through ``transformers.image_utils`` and ``internvl_utils`` at import
time, although nothing on the attention path calls it. ``install()`` makes
``torch.library.register_fake`` a no-op for ``torchvision::`` operators that do not exist,
so the import succeeds; every other registration is untouched. A CUDA machine with a
matching torchvision does not need this and ``install()`` changes nothing there.
"""

from __future__ import annotations

import functools

_INSTALLED = False


def _op_exists(qualname: str) -> bool:
    import torch

    namespace, _, name = qualname.partition("::")
    try:
        return torch._C._dispatch_has_kernel(f"{namespace}::{name}") or hasattr(
            getattr(torch.ops, namespace), name.split(".")[0]
        )
    except Exception:
        return False


def install() -> None:
    """Patch ``torch.library.register_fake`` once (idempotent)."""
    global _INSTALLED
    if _INSTALLED:
        return
    import torch
    import torch.library

    original = torch.library.register_fake

    @functools.wraps(original)
    def register_fake(op, *args, **kwargs):
        if isinstance(op, str) and op.startswith("torchvision::") and not _op_exists(op):
            if args and callable(args[0]):
                return args[0]
            return lambda fn: fn
        return original(op, *args, **kwargs)

    torch.library.register_fake = register_fake
    _INSTALLED = True

"""Import shim for ``sgl_kernel`` on the GPU test machine (tests only; NOT a kernel stand-in).

SGLang 0.5.23 imports ``sgl_kernel`` at module level when CUDA is present (e.g.
``triton_backend.py``: ``from sgl_kernel.utils import is_arch_support_pdl``), but the
``sglang-kernel`` wheel is 373 MB and cannot be carried to the device machine. Nothing on
the target-verify path calls it: verify runs SGLang's Triton ``extend_attention_fwd`` and the
bundled kernel. ``install()`` (only when the real package is absent) serves ``sgl_kernel``
and any submodule; every attribute is a function that raises when called, naming itself,
except ``is_arch_support_pdl`` which answers False (no programmatic dependent launch: a
decode-path launch detail). A call to anything else fails loudly instead of faking a result.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types


class _ShimModule(types.ModuleType):
    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        qual = f"{self.__name__}.{name}"

        def unavailable(*args, **kwargs):
            raise RuntimeError(f"{qual} called, but sgl_kernel is only an import shim on this machine")

        unavailable.__name__ = name
        return unavailable


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname == "sgl_kernel" or fullname.startswith("sgl_kernel."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        mod = _ShimModule(spec.name)
        mod.__path__ = []
        mod.__sgl_kernel_shim__ = True
        if spec.name == "sgl_kernel.utils":
            mod.is_arch_support_pdl = lambda *a, **k: False
        return mod

    def exec_module(self, module):
        return None


def install() -> bool:
    """Install the shim unless a real ``sgl_kernel`` is importable; True when installed."""
    if importlib.util.find_spec("sgl_kernel") is not None:
        return False
    sys.meta_path.append(_Finder())
    return True

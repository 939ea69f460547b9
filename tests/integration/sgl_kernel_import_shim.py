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

#: Submodules SGLang imports inside ``try: ... except ImportError`` with its own fallback
#: (e.g. ``get_scalar_types`` in ``layers/quantization/utils.py``): the shim refuses them so
#: SGLang takes that documented path instead of reading attributes of a shim.
_REFUSED = {"sgl_kernel.scalar_type"}


class _Unavailable:
    """A name served by the shim: raises when called; its attributes are shims too
    (module-level code such as ``x.y.z`` in a list must import, nothing may run)."""

    def __init__(self, qual: str) -> None:
        self._qual = qual
        self.__name__ = qual.rsplit(".", 1)[-1]

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"{self._qual} called, but sgl_kernel is only an import shim on this machine")

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Unavailable(f"{self._qual}.{name}")

    def __repr__(self) -> str:
        return f"<sgl_kernel import shim: {self._qual}>"


class _ShimModule(types.ModuleType):
    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Unavailable(f"{self.__name__}.{name}")


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname in _REFUSED:
            return None
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

"""Bundled paged bf16 MLA target-verify attention kernel (CUDA) and its torch binding.

`mla_verify_fwd` and `supports` take SGLang's extend_attention_fwd arguments in order; see
kernels/mla_verify/api.py for shapes and layouts. Importing this package does not import torch.
"""

from __future__ import annotations


def mla_verify_fwd(*args, **kwargs):
    from .api import mla_verify_fwd as _fwd

    return _fwd(*args, **kwargs)


def supports(*args, **kwargs) -> bool:
    from .api import supports as _supports

    return _supports(*args, **kwargs)


__all__ = ["mla_verify_fwd", "supports"]

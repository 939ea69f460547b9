"""Bundled sparse (DSA) MLA target-verify kernel for GLM-5 / DeepSeek-V3.2 (SGLang `dsa` backend).

`dsa_verify_fwd(q_all, kv_cache, page_table_1, seq_lens, sm_scale)`; see kernels/dsa_verify/api.py
for shapes and layouts, layout.py for the fp8 656-byte row, reference.py for the float64 oracle.
Importing this package does not import torch.
"""

from __future__ import annotations


def dsa_verify_fwd(*args, **kwargs):
    from .api import dsa_verify_fwd as _fwd

    return _fwd(*args, **kwargs)


def supports(*args, **kwargs) -> bool:
    from .api import supports as _supports

    return _supports(*args, **kwargs)


__all__ = ["dsa_verify_fwd", "supports"]

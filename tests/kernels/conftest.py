"""Fixtures for the kernel tests: CUDA and nvcc fixtures that skip with the reason.

The host tools import from ``kernels/`` (pyproject's pytest ``pythonpath`` holds it and the
checkout root), as they do from the unpacked bundle on a host.
"""

from __future__ import annotations

import shutil
import socket

import pytest


@pytest.fixture
def cuda_device():
    """torch.device('cuda'), or skip naming the host when no CUDA device is present."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip(f"no CUDA device on host {socket.gethostname()}")
    return torch.device("cuda")


@pytest.fixture
def nvcc_path():
    """Path of nvcc, or skip with the reason when the CUDA compiler is not installed."""
    path = shutil.which("nvcc")
    if path is None:
        pytest.skip("nvcc not on PATH: the build check needs the CUDA toolkit")
    return path


@pytest.fixture
def cuobjdump_path():
    """Path of cuobjdump (PATH or the nvidia-cuda-cuobjdump package), or skip with the reason."""
    from verify_tools.sass import find_cuobjdump

    path = find_cuobjdump()
    if path is None:
        pytest.skip("cuobjdump not found (PATH, or pip package nvidia-cuda-cuobjdump of the test extra)")
    return path

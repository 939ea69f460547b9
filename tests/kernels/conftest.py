"""Fixtures for the kernel tests: repo root on sys.path, a CUDA fixture that skips with the reason."""

from __future__ import annotations

import shutil
import socket
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


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

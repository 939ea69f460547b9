#!/usr/bin/env bash
# Session 26 call 3 (carry .whl-fi and .whl-flashmla, see tests/device/flashinfer_peer.sh): the shipped kernel at
# 942674e (staged bf16 epilogue, ASYM at >= 16 CTAs per split) against FlashInfer FA2 / FA3 and FlashMLA's dense decode,
# same inputs, same process, on the shapes plus (4, 131072, 4, 16) and B=2 L=16k H=128; then the GPU pytest.
set -o pipefail
export PYTHONUNBUFFERED=1
FI_TIMEOUT_S=420 bash tests/device/flashinfer_peer.sh \
  1:4096:8:16,1:32768:8:16,1:131072:8:16,8:32768:8:16,32:8192:8:16,4:65536:4:64,4:131072:4:16,2:16384:8:128 2>&1 | tail -14
export ORCHESTRATOR_KERNEL_CACHE=/tmp/mlav-cache PYTHONPATH=$PWD/kernels:$PWD
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_kernel_gpu_parity.py tests/kernels/test_dsa_gpu.py 2>&1 | tail -2

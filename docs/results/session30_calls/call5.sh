#!/usr/bin/env bash
# Session 30, call 5 (carry .abbase; ~3 min). Call 4 found cold_code.py's fault: a graph captured on the implicit
# workspace (api._workspace's cache) replayed after a larger call had replaced, and freed, that cache (memcheck:
# put_split_lse writing outside any allocation). Fix: mla_verify.api.cached_workspace keeps outgrown buffers alive
# (the DSA API shares it). Here: the GPU pytest with the new test, the new test against the old cache (must fail:
# the test catches the bug), then cold_code --graph-buffer (the question call 2 was to answer).
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1
R=$PWD; L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a "$L"; }
export PYTHONPATH=$R/kernels:$R
rm -rf /tmp/base && cp -r .abbase/kernels/mla_verify/csrc /tmp/base
python3 -c "import sys; from verify_tools.bench import load_tree; load_tree('sm_90a', sys.argv[1])" /tmp/base >>"$L" 2>&1 &
python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1 &
wait; say built
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_kernel_gpu_parity.py tests/kernels/test_dsa_gpu.py 2>&1 | tail -3 | tee -a "$L"
say pytest
timeout 60 python3 - <<'PY' 2>&1 | tail -3 | tee -a "$L"
import torch
import mla_verify.api as api
from tests.kernels import test_kernel_gpu_parity as t

def old_cache(device, numel, owner="mla_verify"):  # the cache before this change: replaced, old one freed
    key = (owner, str(device))
    ws = api._WS_CACHE.get(key)
    if ws is None or ws.numel() < numel:
        ws = torch.empty(numel, dtype=torch.float32, device=device)
        api._WS_CACHE[key] = ws
    return ws

api.cached_workspace = old_cache
try:
    t.test_replay_on_the_implicit_workspace_survives_a_larger_eager_call(torch.device("cuda"))
    print("old cache: the new test PASSED (does not catch the bug)")
except AssertionError as e:
    print("old cache: the new test FAILED as it should:", str(e).splitlines()[0][:200])
except Exception as e:
    print("old cache: the new test raised", type(e).__name__, str(e)[:200])
PY
say negative
cd kernels || exit 2
timeout 150 python3 ../tests/device/cold_code.py 1:4096:8:16,1:512:8:16 --tree base=/tmp/base --graph-buffer --out "$OUT/cold_gb.json" 2>&1 | tail -12 | tee -a "$L"
say done

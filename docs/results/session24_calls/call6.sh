#!/usr/bin/env bash
# Session 24 call 6 (issue 13, diagnostic): the dense fp8 graph path's cold-code cost. Session 23 measured the bf16
# kernels only (shipped 0.3-0.5 us at B=1); the fp8 graph kernel (mla_verify_split_wgmma_kernel<true, false>) is 5,256
# SASS instructions against the bf16 ws kernel's 4,264, and the sparse w64 fp8 kernel of similar size paid 4.2 us
# before its loop was rolled (call 2). cold_code.py --kv fp8 (new) vs bf16 on the checkout. No carry, ~2 min.
set -o pipefail
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1
R=$PWD; L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a "$L"; }
export PYTHONPATH=$R/kernels:$R
python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1; say built
cd kernels || exit 2
for kv in fp8 bf16; do
  timeout 100 python3 ../tests/device/cold_code.py 1:4096:8:16,1:32768:8:16,8:32768:8:16 --kv $kv --out "$OUT/cold_$kv.json" 2>>"$L" | sed "s/^/$kv /" | tee -a "$L"
done
say done

#!/usr/bin/env bash
# Session 30, call 4: where does tests/device/cold_code.py fault? (call 3: an illegal address at the first timed
# replay with --graph-buffer; call 2 the same, filtered). 1) dense mode without --graph-buffer; 2) with it under
# CUDA_LAUNCH_BLOCKING=1; 3) compute-sanitizer memcheck on (2) -> which kernel, which access.
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1
R=$PWD; L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a "$L"; }
export PYTHONPATH=$R/kernels:$R
python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1; say built
cd kernels || exit 2
timeout 60 python3 ../tests/device/cold_code.py 1:4096:8:16 2>&1 | tail -4 | tee -a "$L"; say plain
CUDA_LAUNCH_BLOCKING=1 timeout 90 python3 ../tests/device/cold_code.py 1:4096:8:16 --graph-buffer 2>&1 | grep -v "^    " | tail -8 | tee -a "$L"; say blocking
timeout 200 compute-sanitizer --tool memcheck --print-limit 4 --log-file "$OUT/memcheck_cold.log" python3 ../tests/device/cold_code.py 1:4096:8:16 --graph-buffer >/dev/null 2>&1
echo "memcheck rc=$?" | tee -a "$L"; grep -v "^=========     " "$OUT/memcheck_cold.log" | head -30 | tee -a "$L"
say done

#!/usr/bin/env bash
# Session 20, call 3: where the shipped S phase's extra ~550 cycles go (trace build: S 2,276 cycles per tile at B=8
# L=32k against 1,730 for its wgmma chain alone, call 2). The trace build as shipped and with MLAV_DIAG_NOLOAD=1 (no KV
# loads from tile 2 on: the gather's slot reads and cp.async are not issued; output wrong, timing only), same shapes,
# one process each. Run from the repository root, no carry, ~4 min.
set -o pipefail
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1
R=$PWD; L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a "$L"; }
export PYTHONPATH=$R/kernels:$R
C=$R/kernels/mla_verify/csrc
python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1 &
for x in "-DMLAV_TRACE=1" "-DMLAV_TRACE=1 -DMLAV_DIAG_NOLOAD=1" "-DMLAV_DIAG_NOLOAD=1"; do
  python3 -c "import sys; from verify_tools.bench import load_tree; load_tree('sm_90a', '$C', extra=sys.argv[1:])" $x >>"$L" 2>&1 &
done
wait; say built
SH=1:32768:8:16,8:32768:8:16,4:131072:4:16
timeout 150 python3 tests/device/dense_trace.py $SH --out "$OUT/trace_loads.json" 2>>"$L" | grep '^\[trace\]' | tee -a "$L"
timeout 150 python3 tests/device/dense_trace.py $SH --define MLAV_DIAG_NOLOAD=1 --out "$OUT/trace_noload.json" 2>>"$L" \
  | grep '^\[trace\]' | tee -a "$L"
say done

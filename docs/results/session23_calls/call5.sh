#!/usr/bin/env bash
# Session 23 call 5 (diagnostic): is instruction fetch what slows the per-CTA kernel's ASYM CTAs (call 4's trace:
# 3,957 vs 3,722 cycles per tile, every phase slower) and what the sparse w64 fp8 kernel's cold code costs (calls 2
# and 4: 2.6-4.5 us at B <= 2, H >= 64)? Nsight Compute's warp-state breakdown (raw stall metrics, "no_instruction" =
# instruction fetch) of: the dense split kernel at B=8 L=32k in MODE 1 (ASYM, .cache/mode1 = the checkout with
# MLAV_WS=2) and MODE 2 (per CTA, .cache/mode2, MLAV_WS=3); the sparse w64 kernel bf16 and fp8 at B=1 n=4 H=64 L=32k
# (ncu flushes the caches before each replay pass by default). Run from the repository root; carry .cache/mode1 .cache/mode2.
set -o pipefail
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1
R=$PWD; cd kernels || exit 2
export PYTHONPATH=$PWD:$R
L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a "$L"; }
for t in mode1 mode2; do
  python3 -c "import sys; from verify_tools.bench import load_tree; load_tree('sm_90a', sys.argv[1])" "$R/.cache/$t" >>"$L" 2>&1 &
done
python3 -c "from dsa_verify._build import load; load('sm_90a')" >>"$L" 2>&1 &
wait; say built
show() { grep -E "stalled_(no_instruction|branch_resolving|barrier|long_scoreboard|short_scoreboard|wait|math_pipe_throttle|mio_throttle|dispatch_stall|selected|lg_throttle|membar|sleeping)_per_issue_active.ratio|smsp__inst_executed.sum |smsp__cycles_active.avg |gpu__time_duration.sum" "$1" | sed 's/  */ /g' | head -20; }
for t in mode1 mode2; do
  timeout 120 ncu --clock-control none -k regex:split_wgmma --launch-skip 2 --launch-count 1 --section WarpStateStats \
    --section InstructionStats --page raw python3 $R/tests/device/dense_ncu.py 8:32768:8:16 sm90wg "$R/.cache/$t" > $OUT/ncu_dense_$t.txt 2>&1
  echo "ncu dense $t rc=$?" | tee -a "$L"; show $OUT/ncu_dense_$t.txt | tee -a "$L"
done
for kv in bf16 fp8; do
  timeout 120 ncu --clock-control none -k regex:dsa_verify_wgmma --launch-skip 2 --launch-count 1 --section WarpStateStats \
    --section InstructionStats --page raw python3 $R/tests/device/dsa_ncu.py 1:32768:4:64 $kv w64 > $OUT/ncu_dsa_w64_$kv.txt 2>&1
  echo "ncu dsa w64 $kv rc=$?" | tee -a "$L"; show $OUT/ncu_dsa_w64_$kv.txt | tee -a "$L"
done
say done

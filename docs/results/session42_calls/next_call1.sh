#!/usr/bin/env bash
# Prepared in session 42 (device budget spent), not run. First command of the next session, no carry (name kind
# nvidia-h100-x1): bash docs/results/session42_calls/next_call1.sh (<= 330 s; CALL_BUDGET_S=N to shorten).
# 1. The phase-2 bench rows of the shipped kernel (E4f) to the end, with JSON (session 42 call 2's bench step ran out
#    of its budget after 13 shape rows, before (4, 131072, 4, 16) and its fp8 / bf16 ratio); no peers.
# 2. Nsight Compute of the shipped split kernel at (8, 32768, 8, 16), an ASYM row FlashMLA leads: speed of light,
#    warp states (the stall mix the issue asks for), memory workload, and per-SASS source counters (gzipped csv), so
#    the seesaw decision (notes, session 42 "Next") starts from where the S and V warpgroups' warps stall.
# Nothing shipped changes.
set -o pipefail
. tests/device/call_budget.sh 330  # R, L, left, say, lim
. tests/device/call_steps.sh       # build_trees, bench_rows
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader | tee -a "$L"
build_trees  # the checkout's csrc only
say built
cd kernels || exit 2
bench_rows 200
say "bench done"
S=8:32768:8:16
timeout "$(lim 80)" ncu --clock-control none -k regex:split_wgmma --launch-skip 2 --launch-count 1 \
  --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis --section InstructionStats \
  python3 "$R/tests/device/dense_ncu.py" $S sm90wg > "$OUT/ncu_ws_b8.txt" 2>&1
echo "ncu rc=$?" | tee -a "$L"
grep -E "Duration|Throughput|Issue Slots|Eligible|Stall|Executed Ipc|Registers|Warp Cycles" "$OUT/ncu_ws_b8.txt" \
  | head -30 | tee -a "$L"
say "ncu done"
timeout "$(lim 80)" ncu --clock-control none -k regex:split_wgmma --launch-skip 2 --launch-count 1 \
  --section SourceCounters --page source --print-source sass --csv \
  python3 "$R/tests/device/dense_ncu.py" $S sm90wg > /tmp/src.csv 2>&1
echo "ncu src rc=$? $(wc -l < /tmp/src.csv) lines" | tee -a "$L"
gzip -c /tmp/src.csv > "$OUT/ncu_src_ws_b8.csv.gz"
say done

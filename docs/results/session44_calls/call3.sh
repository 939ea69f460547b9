#!/usr/bin/env bash
# Session 44, no carry, ~170 s: bash docs/results/session44_calls/call3.sh
# Nsight Compute of the warp-specialized fp8 kernel (mla_verify_split_wgmma_ws_fp8_kernel, MODE 0 consumers, f16
# arithmetic; the eager fp8 path takes it at (4, 131072, 4, 16): 8,192+ tokens per split) on the memory-floored shape
# of the fp8 target: speed of light, warp states, and per-SASS source counters (gzipped csv), so the next step on the
# fp8 kernel (it runs at ~49% of the tensor peak there, session 43) starts from where its warps stall.
# Nothing shipped changes.
set -o pipefail
. tests/device/call_budget.sh 170  # R, L, left, say, lim
. tests/device/call_steps.sh       # build_trees
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader | tee -a "$L"
build_trees  # the checkout's csrc only
say built
cd kernels || exit 2
S=4:131072:4:16
timeout "$(lim 70)" ncu --clock-control none -k regex:ws_fp8 --launch-skip 2 --launch-count 1 \
  --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis --section InstructionStats \
  --section ComputeWorkloadAnalysis python3 "$R/tests/device/dense_ncu.py" $S sm90wg --fp8 > "$OUT/ncu_wsfp8.txt" 2>&1
echo "ncu rc=$?" | tee -a "$L"
grep -E "Duration|Throughput|Issue Slots|Eligible|Stall|Executed Ipc|Registers|Warp Cycles|Pipe" "$OUT/ncu_wsfp8.txt" \
  | head -40 | tee -a "$L"
say "ncu done"
timeout "$(lim 70)" ncu --clock-control none -k regex:ws_fp8 --launch-skip 2 --launch-count 1 \
  --section SourceCounters --page source --print-source sass --csv \
  python3 "$R/tests/device/dense_ncu.py" $S sm90wg --fp8 > /tmp/src.csv 2>&1
echo "ncu src rc=$? $(wc -l < /tmp/src.csv) lines" | tee -a "$L"
gzip -c /tmp/src.csv > "$OUT/ncu_src_wsfp8.csv.gz"
say done

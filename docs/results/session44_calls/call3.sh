#!/usr/bin/env bash
# Session 44, call 3 (no carry, ~230 s): bash docs/results/session44_calls/call3.sh
# /tmp/asym1 = the checkout with asym_fp8.patch, -DMLAV_WS_FP8_ASYM=1 and -DMLAV_ASYM_MIN_CTAS=1 (the warp-specialized
# fp8 kernel with ASYM consumers at every grid: call 2 measured it 0.93-0.96 of MODE 0); /tmp/base = session 42's
# csrc (flag 2 runs the F16 kernel there).
# 1. where it starts to pay: fp8_ws_min_tokens forced to 64 in the process, base / cur (MODE 0) / asym1 at short
#    and middle split chunks (the shipped threshold is 2,048 tokens per split);
# 2. Nsight Compute of the ASYM fp8 kernel at (4, 131072, 4, 16): speed of light and warp states.
set -o pipefail
. tests/device/call_budget.sh 230  # R, L, left, say, lim
. tests/device/call_steps.sh       # build_trees
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader | tee -a "$L"
C=$MLAV_CSRC; D43=docs/results/session43_calls
{ git apply -R $D43/ws_fp8.patch && rm -rf /tmp/base && cp -r $C /tmp/base && git apply $D43/ws_fp8.patch; } 2>>"$L" \
  || { echo "ws_fp8.patch did not reverse" | tee -a "$L"; exit 4; }
{ git apply $D43/asym_fp8.patch && rm -rf /tmp/asym1 && cp -r $C /tmp/asym1 && git apply -R $D43/asym_fp8.patch; } 2>>"$L" \
  || { echo "asym_fp8.patch did not apply" | tee -a "$L"; exit 4; }
{ printf '#define MLAV_WS_FP8_ASYM 1\n#define MLAV_ASYM_MIN_CTAS 1\n'; cat /tmp/asym1/mla_verify.cu; } > /tmp/m.cu \
  && mv /tmp/m.cu /tmp/asym1/mla_verify.cu
build_trees base asym1
say built
cd kernels || exit 2
timeout "$(lim 100)" python3 - "$OUT/ab_ws_min.json" >/dev/null 2>>"$OUT/ab_err.txt" <<'PY'
import dataclasses, sys
from mla_verify import tiles
tiles.DEFAULT_CONFIG["sm_90a"] = dataclasses.replace(tiles.SM90WG, fp8_ws_min_tokens=64)
from verify_tools import bench
bench.main(["--tree-ab", "base=/tmp/base,asym1=/tmp/asym1", "--ab-kv", "fp8", "--ab-fp8-paths", "f16", "--ab-reps", "2",
            "--ab-gb-trees", "none", "--shapes", "1:32768:8:16,1:131072:8:16,4:32768:4:16,8:8192:8:16",
            "--ab-out", sys.argv[1]])
PY
echo "ab ws_min rc=$?" | tee -a "$L"
python3 -m verify_tools.bench --ab-summary "$OUT/ab_ws_min.json" 2>&1 | tee -a "$L"
say "ab ws_min"
timeout "$(lim 70)" ncu --clock-control none -k regex:ws_fp8 --launch-skip 2 --launch-count 1 \
  --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
  python3 "$R/tests/device/dense_ncu.py" 4:131072:4:16 sm90wg /tmp/asym1 --fp8 > "$OUT/ncu_asym1.txt" 2>&1
echo "ncu rc=$?" | tee -a "$L"
grep -E "Duration|Throughput|Issue Slots|Eligible|Stall|Executed Ipc|Warp Cycles|Pipe|Bank" "$OUT/ncu_asym1.txt" \
  | head -40 | tee -a "$L"
say done

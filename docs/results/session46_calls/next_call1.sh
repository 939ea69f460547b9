#!/usr/bin/env bash
# Prepared in session 46, not run: the next session's first command, no carry (nvidia-h100-x1), ~330 s:
#   bash docs/results/session46_calls/next_call1.sh
# Session 46 shipped the fp8 kernel's 3-phase conversion (calls 1-2: 0.966-1.000 of the 5-phase kernel, bitwise,
# parity and racecheck clean) with no device time left for synccheck, memcheck or a trace. This call:
# 1. synccheck and memcheck on the shipped fp8 kernel (the long-split fp8 case);
# 2. A/B of vstep = the checkout + session 45's asym_v_step.patch (the ASYM V warpgroup's step as one helper for the
#    bf16 and fp8 kernels; the bf16 kernels' machine code unchanged, the fp8 kernel's rescheduled; 0 spills at
#    168 registers), fp8 cache, f16 path, on three long-split rows. Keep rule: bitwise and 0.99-1.01 of base;
# 3. traces of the shipped fp8 kernel and of the bf16 cache at (4, 131072, 4, 16) and (8, 32768, 8, 16): the first
#    trace build with session 46's PhaseTrace fix, so the first valid S-warpgroup PV slot of an ASYM kernel, and the
#    producer's cycle against session 45's 4,078 (issue) / 177 (wait) with the 3-phase conversion.
# Prediction, written before the run: vstep 0.99-1.01; the producer's issue slot ~3,900-4,000 cycles (the kernel
# gained 2-3%), the S warpgroup's PV slot ~800-900 cycles per tile (the V warpgroup's PV was 871).
set -o pipefail
. tests/device/call_budget.sh 330  # R, L, left, say, lim
. tests/device/call_steps.sh       # build_trees, ab, san_case
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader | tee -a "$L"
C=$MLAV_CSRC
V=docs/results/session45_calls/asym_v_step.patch
rm -rf /tmp/vstep
{ git apply $V && cp -r $C /tmp/vstep && git apply -R $V; } 2>>"$L" || { echo "vstep patch" | tee -a "$L"; exit 4; }
build_trees vstep
say built
cd kernels || exit 2
san_case synccheck fp8_b8_long_splits_ws_h16
san_case memcheck fp8_b8_long_splits_ws_h16
say sanitizers
ab vstep 80 vstep=/tmp/vstep --ab-kv fp8 --ab-fp8-paths f16 --ab-reps 3 --ab-gb-trees none \
  --shapes 4:131072:4:16,8:32768:8:16,4:65536:4:64
say ab
trace() {  # NAME ARGS..
  local name=$1
  shift
  timeout "$(lim 70)" python3 "$R/tests/device/dense_trace.py" 4:131072:4:16,8:32768:8:16 "$@" \
    --out "$OUT/trace_$name.json" > "$OUT/trace_$name.txt" 2>&1
  echo "trace $name rc=$?" | tee -a "$L"
  grep '^\[trace\]' "$OUT/trace_$name.txt" | tee -a "$L"
}
trace fp8 --fp8 --fp8-path f16
trace bf16
say done

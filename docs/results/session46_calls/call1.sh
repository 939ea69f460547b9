#!/usr/bin/env bash
# Session 46 call 1: the core of session 45's next_call1.sh in what ~300 s of device time holds (the session's
# starts were refused until then): trees base (the checkout), conv3 (MLAV_FP8_CONV=3) and cur (CONV=3 +
# MLAV_FP8_MID=1), each with the producer at 96 registers and the V warpgroup at 168 (conv3_mid.patch). A/B of the
# fp8 cache's f16 path on three long-split rows (bitwise against base), then parity of every fp8 case and the fp8
# graph case on cur. Sanitizers, the trace, preg and vstep stay in next_call1.sh.
set -o pipefail
. tests/device/call_budget.sh 190  # R, L, left, say, lim
. tests/device/call_steps.sh       # defs, build_trees, ab, parity_cases
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader | tee -a "$L"
C=$MLAV_CSRC
rm -rf /tmp/base && cp -r $C /tmp/base
git apply docs/results/session45_calls/conv3_mid.patch 2>>"$L" || { echo "patch did not apply" | tee -a "$L"; exit 4; }
defs /tmp/conv3 MLAV_FP8_CONV=3 MLAV_FP8_PREG=96 MLAV_FP8_VREG=168
defs /tmp/cur MLAV_FP8_CONV=3 MLAV_FP8_MID=1 MLAV_FP8_PREG=96 MLAV_FP8_VREG=168
cp /tmp/cur/mla_verify.cu $C/mla_verify.cu
build_trees base conv3
say built
cd kernels || exit 2
ab conv 80 base=/tmp/base,conv3=/tmp/conv3 --ab-kv fp8 --ab-fp8-paths f16 --ab-reps 3 --ab-gb-trees none \
  --shapes 4:131072:4:16,8:32768:8:16,4:65536:4:64
say ab
parity_cases mid 40 $FP8_CASES,graph_fp8_b2_n8_h16
say done

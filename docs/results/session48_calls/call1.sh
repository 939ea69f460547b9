#!/usr/bin/env bash
# Prepared in session 47, not run: the next session's first command, no carry (nvidia-h100-x1), ~250 s:
#   bash docs/results/session47_calls/next_call1.sh
# TH (th.patch, over the shipped VLOAD kernel): the raw layout puts rows 0-31 of every block where the f16 rows 0-31
# of atoms 0-3 lie, the S warpgroup arrives on a new s_half barrier once its PV steps 0-1 (tokens 0-31) are done
# (wgmma.wait_group 1), and the V warpgroup issues tile t + 2's rows 0-31 there, then rows 32-63 at s_done. Session
# 47's trace: the producer waits ~2,400 cycles a tile for the raw bytes, and an SM has one tile's rows in flight
# only during their landing (notes "Session 47"); TH starts half of them ~400-500 cycles earlier. Compiled here:
# 0 spills at 168 registers, no ptxas wgmma warning.
# 1. A/B base (the checkout) vs th, fp8 cache, f16 path, bitwise against base, five rows;
# 2. th as the checkout: parity of every fp8 case and the fp8 graph case, racecheck, synccheck;
# 3. th's trace at (4, 131072, 4, 16) and (8, 32768, 8, 16) (the producer's landing wait against 2,405 / 2,293).
# Prediction, written before the run: 0.96-0.99 on the H=16 rows, ~1.0 at (4, 65536, 4, 64); landing wait ~2,000.
# Keep rule: bitwise, parity and sanitizers clean, <= 0.99 on two H=16 rows and no row above 1.01. If kept: the
# in-place test (tests/kernels/test_dense_fp8_inplace.py) must read fp8_raw_off(b, r).
set -o pipefail
. tests/device/call_budget.sh 250  # R, L, left, say, lim
. tests/device/call_steps.sh       # patched, build_trees, ab, use, parity_cases, san_case, trace
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee -a "$L"
rm -rf /tmp/base /tmp/th && cp -r $MLAV_CSRC /tmp/base
patched th docs/results/session47_calls/th.patch
build_trees base th
say built
cd kernels || exit 2
ab th 90 base=/tmp/base,th=/tmp/th --ab-kv fp8 --ab-fp8-paths f16 --ab-reps 3 --ab-gb-trees none \
  --shapes 4:131072:4:16,8:32768:8:16,4:65536:4:64,1:131072:8:16,32:8192:8:16
say ab
use th
parity_cases th 40 $FP8_CASES,graph_fp8_b2_n8_h16
san_case racecheck fp8_b8_long_splits_ws_h16
san_case synccheck fp8_b8_long_splits_ws_h16
trace th 50 4:131072:4:16,8:32768:8:16 --fp8 --fp8-path f16
say done

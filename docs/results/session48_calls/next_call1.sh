#!/usr/bin/env bash
# Prepared in session 48 (its call 3, refused twice: never ran), for the next session, ~210 s, no carry:
#   bash docs/results/session48_calls/next_call1.sh
# Session 48 call 3 (~210 s, no carry): the gated pair's order. Call 2: with the F16 kernel / bf16 decode first and
# the warp-specialized kernel second (its programmatic dependent; "cur" here), graph replays of "f16" at long chunks
# ran 1.046-1.081x the warp-specialized kernel alone, and fp8 graph-buffer rows at short lengths 1.10-1.12.
# wsf = MLAV_GATE_WS_FIRST=1: the warp-specialized kernel first (a plain launch), the other one its dependent, whose
# CTA 0 waits for it at its start; wse = wsf + MLAV_GATE_WAIT_END=1: a working CTA 0 waits at its end instead.
# base = the csrc before the gated pair (5115523; gsel_rev_final.patch = the csrc diff since reversed). The pair is
# opt-in (mla_verify_fwd fp8_graph_gate; bench --fp8-graph-gate: the timed rows and the graph-buffer rows take it).
# 1. A/B base / cur / wsf / wse, fp8 cache, graph replays of "auto" and "f16", two long-chunk shapes;
# 2. fp8 graph-buffer rows of wsf and wse (every length; the short ones pay the shut kernel; cur's: call 2);
# 3. the gated graph case on the checkout; wse as the checkout: the fp8 graph parity cases, memcheck on the new one.
# Prediction: wsf's and wse's "f16" 1.00-1.02 of base's; short graph-buffer rows 1.05-1.08 (wse the lower).
set -o pipefail
. tests/device/call_budget.sh 220  # R, L, left, say, lim
. tests/device/call_steps.sh       # patched, defs, build_trees, ab, use, parity_cases, san_case
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee -a "$L"
patched base docs/results/session48_calls/gsel_rev_final.patch
defs /tmp/wsf MLAV_GATE_WS_FIRST=1
defs /tmp/wse MLAV_GATE_WS_FIRST=1 MLAV_GATE_WAIT_END=1
build_trees base wsf wse
say built
cd kernels || exit 2
ab order 130 base=/tmp/base,wsf=/tmp/wsf,wse=/tmp/wse --ab-kv fp8 --ab-fp8-paths auto,f16 --ab-reps 3 \
  --fp8-graph-gate --ab-gb-trees wsf,wse --gb-kv fp8 --shapes 4:131072:4:16,8:32768:8:16
grep 'graph-buffer' "$OUT/ab_err.txt" | cut -c1-120 | tee -a "$L"
say ab
parity_cases cur 30 graph_fp8_ws_b1_n8_h64  # the committed order (its gated instances never ran on a GPU)
use wse
parity_cases wse 30 graph_fp8_ws_b1_n8_h64,graph_fp8_b2_n8_h16
san_case memcheck graph_fp8_ws_b1_n8_h64
say done

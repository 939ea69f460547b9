#!/usr/bin/env bash
# Prepared in session 50 (never ran), ~510 s, no carry:   bash docs/results/session50_calls/next_call2.sh
# (run timeout ~540). Two halves, each held to its budget:
# 1. DSA (DSA_S = 300 s; files under $OUT/dsa): base = the checkout, bfp = the checkout with DSAV_PARTIAL_BF16
#    defined (bf16 partials in the workspace; session 49). base vs bfp on (1, 32k, 4, 8) and (8, 32k, 8, 8), bf16 and
#    fp8, two alternating rounds; bfp's quick parity (every config, graph replays, the extreme-scale fp8 case); the
#    timeline of the headline shape on base (dsa_bench --trace: auto, m16, n8 at 32/16/8, n8s, and session 50's
#    n8x at 32/16, n8x8 at 16, n8xr at 32/16); under the sm_120 occupancy emulation (experimental build, sm_120a's
#    rules), n8xrs at 32 splits beside sm_120a's auto at (1, 32k, 4, 8) and (1, 32k, 8, 8).
#    Predictions: bfp / base 0.95-0.98 at B=1, ~0.99 at B=8; n8xrs / auto (m16) 0.85-0.95 under the emulation.
# 2. Dense (DENSE_S = 210 s): session 48's prepared call 3 as written there (the gated pair's order: wsf / wse A/B,
#    their fp8 graph-buffer rows, the gated graph case, parity and memcheck on wse). Its header has the steps and
#    the prediction ("f16" pair / ws kernel alone 1.00-1.02; short graph-buffer rows 1.05-1.08).
set -o pipefail
mkdir -p "$OUT/dsa"
(
  OUT=$OUT/dsa
  . tests/device/call_budget.sh "${DSA_S:-300}"
  . tests/device/dsa_steps.sh
  nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee -a "$L"
  dsa_tree base
  dsa_tree bfp DSAV_PARTIAL_BF16=1
  dsa_build base base:exp bfp
  say built
  dsa_build_trace base
  dsa_bench_ab 40 1:32768:4:8,8:32768:8:8 2 base bfp
  say bfp bench
  dsa_parity bfp 60 --quick --no-peer
  say bfp parity
  dsa_trace base 50
  dsa_bench_alt base 40 1:32768:4:8,1:32768:8:8 n8xrs 32 --sm120-occupancy
  say done
)
git status --short | head -5
CALL_BUDGET_S=${DENSE_S:-210} bash docs/results/session48_calls/next_call1.sh

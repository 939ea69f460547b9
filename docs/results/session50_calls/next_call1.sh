#!/usr/bin/env bash
# Prepared in session 50 (device lending paused all session: never ran), ~520 s, no carry:
#   bash docs/results/session50_calls/next_call1.sh   (run timeout ~560)
# The n8x call. base = the checkout; base:exp = its experimental build (n8x, cfg 14, bf16 only: n8's S phase per warp,
# P^T and the warps' maxima through shared memory with one barrier per tile, the PV split by dims, no end merge).
# n8x8 (cfg 15): the same with 8 warps (BN 128) and one stage, freed by a second barrier per tile.
# Neither has run: every warp reads every warp's ring stage after the tile's barrier, and a stage is refilled one
# barrier later than in n8.
# 1. JIT builds of base and base:exp in parallel; base's DSAV_TRACE build behind them;
# 2. parity of both: the full suite's bf16 cases and graph replays (fp8 cases skipped: no kernel), no peer;
# 3. n8x at 32 and 16 splits and n8x8 at 16 beside auto at (1, 32k, 4, 8), (1, 32k, 8, 8), (2, 32k, 4, 8), one
#    process each;
# 4. racecheck of both on hostile_b2_n4_h64_bf16 (2 splits of 16 / 8 tiles: the P slots' parity, the refills),
#    memcheck on the two hostile bf16 cases;
# 5. the timeline of the headline shape on base (dsa_bench --trace: auto, m16, n8 at 32/16/8, n8s, n8x at 32/16,
#    n8x8 at 16).
# Predictions (written before any run): n8x / auto at (1, 32k, 4, 8) S=32 (auto: m16, 32 splits): 0.85-0.95 (n8's
# compute, ~1.25 µs against m16's ~3.0 in session 5, with an end of ~0.5 µs instead of n8's 64 KB merge); at
# (1, 32k, 8, 8) S=16 (auto: n8, 16 splits): 0.85-0.95; n8x8 at 16 splits within 0.95-1.05 of n8x at 32 at n=4
# (half the partials, twice the bytes per CTA).
set -o pipefail
. tests/device/call_budget.sh 520  # R, L, left, say, lim
. tests/device/dsa_steps.sh        # dsa_tree, dsa_build(_trace), dsa_bench_alt, dsa_parity, dsa_san, dsa_trace
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee -a "$L"
dsa_tree base
dsa_build base base:exp
say built
dsa_build_trace base
dsa_parity base 100 --configs n8x,n8x8 --no-peer
say n8x parity
dsa_bench_alt base 40 1:32768:4:8,1:32768:8:8,2:32768:4:8 n8x 32
dsa_bench_alt base 40 1:32768:4:8,1:32768:8:8,2:32768:4:8 n8x 16
dsa_bench_alt base 40 1:32768:4:8,1:32768:8:8,2:32768:4:8 n8x8 16
say n8x bench
dsa_san base racecheck 80 hostile_b2_n4_h64_bf16 n8x,n8x8
dsa_san base memcheck 60 hostile_b1_n4_h8_bf16,hostile_b2_n4_h64_bf16 n8x,n8x8
say sanitizers
dsa_trace base 50
say done

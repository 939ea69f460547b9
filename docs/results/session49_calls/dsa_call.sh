#!/usr/bin/env bash
# Session 49, DSA call (~200 s, no carry): bf16 partials in the workspace (csrc -DDSAV_PARTIAL_BF16, experimental)
# against the shipped fp32 partials, and the per-CTA timeline of the headline shape on this card.
# base = the checkout (its default build: fp32 partials, .text byte-identical to 6712fb3's, sm_90a and sm_120a);
# bfp = the checkout with DSAV_PARTIAL_BF16 defined (not bitwise: each partial rounded to bf16, u = 2^-9 relative;
# a CPU emulation of B=1 n=4 H=8 S=32 put rel_fro at 1.19u against 0.85u with fp32 partials; the bound is 4u).
# 1. JIT builds of base and bfp in parallel (then their DSAV_TRACE builds, behind the bench);
# 2. bench of the three H=8 split shapes (bf16 + fp8), processes alternating base, bfp, base, bfp (no peers);
# 3. quick parity of bfp (every config, graph replays, the extreme-scale fp8 case; no peer);
# 4. the timeline (dsa_bench --trace) of base and bfp.
# Prediction: bfp / base 0.95-0.98 at B=1 (the store and combine phases ~0.3-0.5 µs shorter), ~0.99 at B=8.
set -o pipefail
. tests/device/call_budget.sh 230  # R, L, left, say, lim
. tests/device/dsa_steps.sh        # dsa_tree, dsa_build, dsa_build_trace, dsa_bench_ab, dsa_parity, dsa_trace
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee -a "$L"
dsa_tree base
dsa_tree bfp DSAV_PARTIAL_BF16=1
dsa_build base bfp
say built
dsa_build_trace base bfp
dsa_bench_ab 40 1:32768:4:8,1:32768:8:8,8:32768:8:8 2 base bfp
say bench
dsa_parity bfp 60 --quick --no-peer
say parity
dsa_trace base 40
dsa_trace bfp 40
say done

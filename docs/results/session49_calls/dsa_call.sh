#!/usr/bin/env bash
# Session 49, DSA call (~240 s, no carry): bf16 partials in the workspace (csrc -DDSAV_PARTIAL_BF16, experimental)
# against the shipped fp32 partials, and the per-CTA timeline of the headline shape on this card.
# base = the checkout (its default build: fp32 partials, .text byte-identical to 6712fb3's, sm_90a and sm_120a);
# bfp = the checkout with DSAV_PARTIAL_BF16 defined (not bitwise: each partial rounded to bf16, u = 2^-9 relative;
# a CPU emulation of B=1 n=4 H=8 S=32 put rel_fro at 1.19u against 0.85u with fp32 partials; the bound is 4u).
# 1. JIT builds of base and bfp in parallel (then their DSAV_TRACE builds, behind the bench);
# 2. bench of the three H=8 split shapes (bf16 + fp8), processes alternating base, bfp, base, bfp (no peers);
# 3. quick parity of bfp (every config, graph replays, the extreme-scale fp8 case; no peer);
# 4. n8 at 8 and 16 splits beside auto (m16, 32 splits) at B=1 n=4, same process each;
# 5. the timeline (dsa_bench --trace) of base and bfp.
# Prediction: bfp / base 0.95-0.98 at B=1 (the store and combine phases ~0.3-0.5 µs shorter), ~0.99 at B=8;
# n8 / auto 1.05-1.1 at 16 splits, 1.1-1.2 at 8 (32 SMs pull the 9.4 MB: per-SM rate bound).
set -o pipefail
. tests/device/call_budget.sh 240  # R, L, left, say, lim
. tests/device/dsa_steps.sh        # dsa_tree, dsa_build(_trace), dsa_bench_ab/_alt, dsa_parity, dsa_trace
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
dsa_bench_alt base 30 1:32768:4:8 n8 8   # n8 with fewer, longer splits at B=1: 32 CTAs, each warp 4 tiles
dsa_bench_alt base 30 1:32768:4:8 n8 16
say alt
dsa_trace base 40
dsa_trace bfp 40
say done

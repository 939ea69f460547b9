#!/usr/bin/env bash
# Session 49, DSA call (~200 s, no carry): f16 partials in the workspace (csrc -DDSAV_PARTIAL_F16, experimental) against
# the shipped fp32 partials, and the per-CTA timeline of the headline shape on this card.
# base = the checkout (its default build: fp32 partials, .text byte-identical to 6712fb3's, sm_90a and sm_120a);
# f16 = the checkout with DSAV_PARTIAL_F16 defined.
# 1. JIT builds of base and f16 in parallel (then their DSAV_TRACE builds, behind the bench);
# 2. bench of the three H=8 split shapes (bf16 + fp8), processes alternating base, f16, base, f16 (no peers);
# 3. quick parity of f16 (every config, graph replays, no peer);
# 4. the timeline (dsa_bench --trace) of base and f16.
# Prediction: f16 / base 0.95-0.98 at B=1 (the store and combine phases ~0.3-0.5 µs shorter), ~0.99 at B=8.
set -o pipefail
. tests/device/call_budget.sh 230  # R, L, left, say, lim
. tests/device/dsa_steps.sh        # dsa_tree, dsa_build, dsa_build_trace, dsa_bench_ab, dsa_parity, dsa_trace
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee -a "$L"
dsa_tree base
dsa_tree f16 DSAV_PARTIAL_F16=1
dsa_build base f16
say built
dsa_build_trace base f16
dsa_bench_ab 40 1:32768:4:8,1:32768:8:8,8:32768:8:8 2 base f16
say bench
dsa_parity f16 60 --quick --no-peer
say parity
dsa_trace base 40
dsa_trace f16 40
say done

#!/usr/bin/env bash
# Prepared in session 50 (device lending paused all session: never ran), ~560 s, no carry:
#   bash docs/results/session50_calls/next_call1.sh   (run timeout ~590)
# The n8x call. base = the checkout; base:exp = its experimental build with session 50's split-PV configs (CfgX in
# dsa_verify_n8.cuh: n8's S phase per warp, P^T and the warps' maxima through shared memory with one barrier per tile,
# the PV split by dims, no end merge of O^T):
#   n8x (cfg 14, bf16): 4 warps x 2 stages; n8x8 (cfg 15, bf16): 8 warps x 1 stage (a second barrier per tile);
#   n8xr (cfg 16, fp8): n8x with n8r's in-register e4m3 path; n8xrs (cfg 17, fp8): one stage, sm_120-sized.
# None has run: every warp reads every warp's ring stage after the tile's barrier, a stage is refilled one barrier
# later than in n8, and the fp8 consumers keep sigma of their own scale block over every warp's rows.
# 1. JIT builds of base and base:exp in parallel;
# 2. parity of the four: the full suite (graph replays included; each config's other cache kind skipped), no peer;
# 3. beside auto at (1, 32k, 4, 8), (1, 32k, 8, 8), (2, 32k, 4, 8), one process each: n8x at 32 splits, n8x8 at 16,
#    n8xr at 32 (the other cache kind's rows say "no ... kernel");
# 4. racecheck of the four on hostile_b2_n4_h64_bf16 and hostile_b2_n4_h16_fp8 (several tiles per split: the P slots'
#    parity, the refills), memcheck on the hostile H=8 cases.
# (Their timeline is in next_call2.sh.)
# Predictions (written before any run): n8x / auto at (1, 32k, 4, 8) bf16 (auto: m16, 32 splits): 0.85-0.95 (n8's
# compute, ~1.25 µs against m16's ~3.0 in session 5, with an end of ~0.5 µs instead of n8's 64 KB merge); at
# (1, 32k, 8, 8) (auto: n8, 16 splits): 0.85-0.95; n8x8 at 16 within 0.95-1.05 of n8x at 32; n8xr / auto at
# (1, 32k, 4, 8) fp8 (auto: m16w, 32 splits): 0.85-0.95.
set -o pipefail
. tests/device/call_budget.sh 560  # R, L, left, say, lim
. tests/device/dsa_steps.sh        # dsa_tree, dsa_build, dsa_bench_alt, dsa_parity, dsa_san
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee -a "$L"
dsa_tree base
dsa_build base base:exp
say built
dsa_parity base 130 --configs n8x,n8x8,n8xr,n8xrs --no-peer
say parity
dsa_bench_alt base 40 1:32768:4:8,1:32768:8:8,2:32768:4:8 n8x 32
dsa_bench_alt base 40 1:32768:4:8,1:32768:8:8,2:32768:4:8 n8x8 16
dsa_bench_alt base 40 1:32768:4:8,1:32768:8:8,2:32768:4:8 n8xr 32
say bench
dsa_san base racecheck 90 hostile_b2_n4_h64_bf16,hostile_b2_n4_h16_fp8 n8x,n8x8,n8xr,n8xrs
dsa_san base memcheck 60 hostile_b1_n4_h8_bf16,hostile_b1_n4_h8_fp8 n8x,n8x8,n8xr,n8xrs
say done

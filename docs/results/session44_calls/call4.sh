#!/usr/bin/env bash
# Session 44, no carry, ~260 s: bash docs/results/session44_calls/call4.sh
# ring_fp8.patch (session 44, not run before): the warp-specialized fp8 kernel with ONE f16 stage and a two-slot raw
# fp8 ring in the second stage's bytes (template RING, -DMLAV_WS_FP8_RING=1). Why: at (4, 131072, 4, 16) the kernel
# takes ~5,900 SM cycles per 64-token tile (0.844 x 218 us over 62 tiles per split) where the consumers' wgmma and
# softmax need ~3,100 and the tile's fp8 bytes ~3,200 of the SM's share of DRAM bandwidth: it behaves as if nothing
# overlaps, because a tile's rows are issued only once its stage's PV is done, two stages back, so the DRAM latency
# under load is exposed every tile. With the ring, tile t + 2's rows are issued right after tile t's conversion;
# the conversion itself (~900 cycles of smem traffic) runs while the consumers wait. Model: ~4,000 cycles per tile.
# cur = the checkout with the patch and the define; base = the checkout as shipped (/tmp/base, MODE 0 kernel).
# 1. A/B fp8 cache, f16 path (flag 2 where the split chunk >= 2,048), cur vs base, bitwise check against base;
# 2. parity of every fp8 case on cur (sm90wg, both arithmetics), racecheck and synccheck on the long-split case.
# Keep rule: bitwise equal to base, parity passing, sanitizers clean, cur <= 0.95 of base on the memory-floored shape.
set -o pipefail
. tests/device/call_budget.sh 260  # R, L, left, say, lim
. tests/device/call_steps.sh       # build_trees, san_case
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader | tee -a "$L"
C=$MLAV_CSRC; D=docs/results/session44_calls
rm -rf /tmp/base && cp -r $C /tmp/base
git apply $D/ring_fp8.patch 2>>"$L" || { echo "patch did not apply" | tee -a "$L"; exit 4; }
{ echo "#define MLAV_WS_FP8_RING 1"; cat $C/mla_verify.cu; } > /tmp/m.cu && mv /tmp/m.cu $C/mla_verify.cu
build_trees base
say built
cd kernels || exit 2
timeout "$(lim 110)" python3 -m verify_tools.bench --tree-ab base=/tmp/base --ab-kv fp8 --ab-fp8-paths f16 --ab-reps 3 \
  --ab-gb-trees none --shapes 4:131072:4:16,8:32768:8:16,32:8192:8:16,4:65536:4:64 --ab-out "$OUT/ab_ring.json" \
  >/dev/null 2>>"$OUT/ab_err.txt"
echo "ab rc=$?" | tee -a "$L"
python3 -m verify_tools.bench --ab-summary "$OUT/ab_ring.json" 2>&1 | tee -a "$L"
say ab
FP8C=fp8_seed_b1_prefix65k_n8_h16_chain,fp8_b4_varlen_tree_h16_u8,fp8_b2_n16_h128_tree_scales,fp8_b32_chain_n8_h16_prefix1k
timeout "$(lim 60)" python3 -m verify_tools.parity --cases $FP8C,fp8_b8_long_splits_ws_h16,fp8_codes_exact \
  --configs sm90wg --json > "$OUT/parity_ring.json" 2>>"$OUT/parity_err.txt"
echo "parity ring rc=$?" | tee -a "$L"
python3 -c "import json, sys; d = json.load(open(sys.argv[1])); print('parity', d.get('ok'), d.get('summary'))" \
  "$OUT/parity_ring.json" 2>&1 | tee -a "$L"
san_case racecheck fp8_b8_long_splits_ws_h16
san_case synccheck fp8_b8_long_splits_ws_h16
say done

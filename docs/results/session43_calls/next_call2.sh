#!/usr/bin/env bash
# Superseded: session 44 ran it as docs/results/session44_calls/call2.sh (plus an every-grid ASYM tree).
# Prepared in session 43, not run (compiled on the host: 0 spills, no wgmma serialization note; the default build with
# the patch applied is byte-identical to the shipped module). No carry, nvidia-h100-x1, ~300 s:
#   bash docs/results/session43_calls/next_call2.sh
# asym_fp8.patch: the warp-specialized fp8 kernel with the bf16 kernel's ASYM consumers (S warpgroup: S at m64n64, the
# softmax, PV of dims 0..255; V warpgroup: PV of dims 256..511; registers S 240, V 176, producer 88), f16 on the prefix
# tiles, launched under -DMLAV_WS_FP8_ASYM=1 where a split's grid holds >= 16 CTAs. /tmp/asym = the checkout's csrc
# with the patch and the define; cur = the checkout (MODE 0 consumers).
# 1. A/B fp8 cache, f16 path, cur vs asym on the batched rows (the tool reports bitwise equality only against a tree
#    named base, so none here: correctness is step 2's parity against the oracle).
# 2. parity of every fp8 case on the asym tree (sm90wg, both arithmetics; the f16 path takes ASYM where the rule picks
#    flag 2 and the grid has >= 16 CTAs per split: fp8_b8_long_splits_ws_h16), racecheck and synccheck on that case.
# Keep rule: parity passing, sanitizers clean, asym <= 0.97 of cur on the batched rows it serves.
set -o pipefail
. tests/device/call_budget.sh 300  # R, L, left, say, lim
. tests/device/call_steps.sh       # san_case
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader | tee -a "$L"
C=kernels/mla_verify/csrc; D=docs/results/session43_calls
{ git apply $D/asym_fp8.patch && rm -rf /tmp/asym && cp -r $C /tmp/asym && git apply -R $D/asym_fp8.patch; } 2>>"$L" \
  || { echo "patch did not apply" | tee -a "$L"; exit 4; }
{ echo "#define MLAV_WS_FP8_ASYM 1"; cat /tmp/asym/mla_verify.cu; } > /tmp/asym/mla_verify.cu.new && mv /tmp/asym/mla_verify.cu.new /tmp/asym/mla_verify.cu
cd kernels || exit 2
python3 -c "import sys; from verify_tools.bench import load_tree; load_tree('sm_90a', '/tmp/asym')" >>"$L" 2>&1 &
python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1 || { tail -5 "$L"; exit 3; }
wait
say built
timeout "$(lim 130)" python3 -m verify_tools.bench --tree-ab asym=/tmp/asym --ab-kv fp8 --ab-fp8-paths f16 --ab-reps 3 \
  --ab-gb-trees none --shapes 8:32768:8:16,32:8192:8:16,4:65536:4:64,16:32768:4:16 --ab-out "$OUT/ab_asym_fp8.json" \
  >/dev/null 2>>"$OUT/ab_err.txt"
echo "ab rc=$?" | tee -a "$L"
python3 -m verify_tools.bench --ab-summary "$OUT/ab_asym_fp8.json" 2>&1 | tee -a "$L"
say ab
# parity and the sanitizers on the asym build: the checkout's csrc replaced by /tmp/asym
cd "$R" && rm -rf $C && cp -r /tmp/asym $C && cd kernels || exit 2
python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1 || { tail -5 "$L"; exit 3; }
FP8C=fp8_seed_b1_prefix65k_n8_h16_chain,fp8_b4_varlen_tree_h16_u8,fp8_b2_n16_h128_tree_scales,fp8_b32_chain_n8_h16_prefix1k
timeout "$(lim 80)" python3 -m verify_tools.parity --cases $FP8C,fp8_b8_long_splits_ws_h16,fp8_codes_exact \
  --configs sm90wg --json > "$OUT/parity_asym.json" 2>>"$OUT/parity_err.txt"
echo "parity asym rc=$?" | tee -a "$L"
python3 -c "import json, sys; d = json.load(open(sys.argv[1])); print('parity', d.get('ok'), d.get('summary'))" \
  "$OUT/parity_asym.json" 2>&1 | tee -a "$L"
san_case racecheck fp8_b8_long_splits_ws_h16
san_case synccheck fp8_b8_long_splits_ws_h16
say done

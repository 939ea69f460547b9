#!/usr/bin/env bash
# Session 44, call 1 (no carry, ~570 s): bash docs/results/session44_calls/call1.sh
# Trees: cur = the checkout (session 43's shipped kernels: the warp-specialized fp8 kernel, MODE 0, for flag 2);
# /tmp/base = session 42's csrc (ws_fp8.patch reversed: flag 2 runs the F16 kernel there); /tmp/ring = cur with
# ring_fp8.patch and -DMLAV_WS_FP8_RING=1 (one f16 stage, a two-slot raw fp8 ring, so a tile's fp8 rows are issued two tiles ahead; the notes, session 44).
# 1. A/B fp8 cache, f16 path, base / cur / ring on the long-split rows (bitwise against base);
# 2. parity of every fp8 case and racecheck / synccheck on the long-split case, on ring (checkout swapped to it);
# 3. on cur again: the GPU tests of the fp8 arithmetics (incl. the new bitwise test) and the parity case whose f16
#    path takes the shipped warp-specialized kernel by the rule (fp8_b8_long_splits_ws_h16);
# 4. bf16 cache A/B, cur vs base (the ASYM kernel's four moved address instructions; and the bf16 time of
#    (4, 131072, 4, 16) for the fp8 / bf16 ratio);
# 5. where the warp-specialized fp8 kernels start to pay: fp8_ws_min_tokens forced to 64 in the process, base (F16
#    kernel) / cur / ring at 128 .. 2,048 tokens per split.
set -o pipefail
. tests/device/call_budget.sh 570  # R, L, left, say, lim
. tests/device/call_steps.sh       # build_trees, san_case
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader | tee -a "$L"
C=$MLAV_CSRC; D43=docs/results/session43_calls; D=docs/results/session44_calls
{ git apply -R $D43/ws_fp8.patch && rm -rf /tmp/base && cp -r $C /tmp/base && git apply $D43/ws_fp8.patch; } 2>>"$L" \
  || { echo "ws_fp8.patch did not reverse" | tee -a "$L"; exit 4; }
{ git apply $D/ring_fp8.patch && rm -rf /tmp/ring && cp -r $C /tmp/ring && git apply -R $D/ring_fp8.patch; } 2>>"$L" \
  || { echo "ring_fp8.patch did not apply" | tee -a "$L"; exit 4; }
{ echo "#define MLAV_WS_FP8_RING 1"; cat /tmp/ring/mla_verify.cu; } > /tmp/m.cu && mv /tmp/m.cu /tmp/ring/mla_verify.cu
rm -rf /tmp/cur && cp -r $C /tmp/cur
grep -q ws_fp8 $C/mla_verify.cu && ! grep -q ws_fp8 /tmp/base/mla_verify.cu && grep -q "RING 1" /tmp/ring/mla_verify.cu \
  || { echo "trees wrong" | tee -a "$L"; exit 4; }
build_trees base ring
say built
cd kernels || exit 2
timeout "$(lim 130)" python3 -m verify_tools.bench --tree-ab base=/tmp/base,ring=/tmp/ring --ab-kv fp8 --ab-fp8-paths f16 \
  --ab-reps 3 --ab-gb-trees none --shapes 4:131072:4:16,8:32768:8:16,32:8192:8:16,4:65536:4:64 \
  --ab-out "$OUT/ab_ring.json" >/dev/null 2>>"$OUT/ab_err.txt"
echo "ab ring rc=$?" | tee -a "$L"
python3 -m verify_tools.bench --ab-summary "$OUT/ab_ring.json" 2>&1 | tee -a "$L"
say "ab ring"
use ring
FP8C=fp8_seed_b1_prefix65k_n8_h16_chain,fp8_b4_varlen_tree_h16_u8,fp8_b2_n16_h128_tree_scales,fp8_b32_chain_n8_h16_prefix1k
timeout "$(lim 60)" python3 -m verify_tools.parity --cases $FP8C,fp8_b8_long_splits_ws_h16,fp8_codes_exact \
  --configs sm90wg --json > "$OUT/parity_ring.json" 2>>"$OUT/parity_err.txt"
echo "parity ring rc=$?" | tee -a "$L"
python3 -c "import json, sys; d = json.load(open(sys.argv[1])); print('parity', d.get('ok'), d.get('summary'))" \
  "$OUT/parity_ring.json" 2>&1 | tee -a "$L"
san_case racecheck fp8_b8_long_splits_ws_h16
san_case synccheck fp8_b8_long_splits_ws_h16
say "ring checked"
use cur
timeout "$(lim 40)" python3 -m pytest -q -p no:cacheprovider -m gpu "$R/tests/kernels/test_kernel_gpu_parity.py" \
  -k "fp8" 2>&1 | tail -4 | tee -a "$L"
timeout "$(lim 30)" python3 -m verify_tools.parity --cases fp8_b8_long_splits_ws_h16 --configs sm90wg --json \
  > "$OUT/parity_ws.json" 2>>"$OUT/parity_err.txt"
echo "parity ws rc=$?" | tee -a "$L"
python3 -c "import json, sys; d = json.load(open(sys.argv[1])); print('parity', d.get('ok'), d.get('summary'))" \
  "$OUT/parity_ws.json" 2>&1 | tee -a "$L"
say "cur checked"
timeout "$(lim 60)" python3 -m verify_tools.bench --tree-ab base=/tmp/base --ab-kv bf16 --ab-reps 2 --ab-gb-trees none \
  --shapes 4:131072:4:16,8:32768:8:16,32:8192:8:16 --ab-out "$OUT/ab_bf16.json" >/dev/null 2>>"$OUT/ab_err.txt"
echo "ab bf16 rc=$?" | tee -a "$L"
python3 -m verify_tools.bench --ab-summary "$OUT/ab_bf16.json" 2>&1 | tee -a "$L"
say "ab bf16"
timeout "$(lim 90)" python3 - "$OUT/ab_ws_min.json" >/dev/null 2>>"$OUT/ab_err.txt" <<'PY'
import dataclasses, sys
from mla_verify import tiles
tiles.DEFAULT_CONFIG["sm_90a"] = dataclasses.replace(tiles.SM90WG, fp8_ws_min_tokens=64)
from verify_tools import bench
bench.main(["--tree-ab", "base=/tmp/base,ring=/tmp/ring", "--ab-kv", "fp8", "--ab-fp8-paths", "f16", "--ab-reps", "2",
            "--ab-gb-trees", "none", "--shapes", "1:8192:8:16,1:32768:8:16,1:131072:8:16,4:32768:4:16",
            "--ab-out", sys.argv[1]])
PY
echo "ab ws_min rc=$?" | tee -a "$L"
python3 -m verify_tools.bench --ab-summary "$OUT/ab_ws_min.json" 2>&1 | tee -a "$L"
say done

#!/usr/bin/env bash
# Session 23 call 3: the per-CTA choice again (MODE 2 of the warp-specialized kernel: ASYM where a CTA holds >= 32
# tiles, the token-split consumers elsewhere), now with call 2's fixes in both bodies' kernel: every ASYM handoff an
# mbarrier, and Q and tile 0 issued before the init barrier (EARLY, near the entry: call 2 cut ASYM's cold-code cost
# 2.46 -> 1.26 us at B=1 L=4k). Session 22 call 4 measured the per-CTA kernel without them: 1.12x at B=1 L=4k (cold
# code: call 1), 0.98-0.99 batched. Trees: cur = the checkout built with MLAV_WS=3 (MODE 2); asym = the checkout with
# MLAV_WS=2 (MODE 1: ASYM everywhere, carried as .cache/asym_early); base = HEAD's csrc (.cache/base_csrc). Then the
# cold-code cost, full parity, memcheck and the dense GPU pytest on cur. Run from the repository root.
set -o pipefail
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1
R=$PWD; L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a "$L"; }
sed -i 's/#define MLAV_WS 1/#define MLAV_WS 3/' kernels/mla_verify/csrc/mla_verify.cu
grep -c "define MLAV_WS 3" kernels/mla_verify/csrc/mla_verify.cu | tee -a "$L"
export PYTHONPATH=$R/kernels:$R
python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1 &
for t in base_csrc asym_early; do
  python3 -c "import sys; from verify_tools.bench import load_tree; load_tree('sm_90a', sys.argv[1])" "$R/.cache/$t" >>"$L" 2>&1 &
done
wait; say built
cd kernels || exit 2
SH=1:4096:8:16,1:16384:8:16,1:32768:8:16,1:131072:8:16,4:131072:4:16,8:32768:8:16,32:8192:8:16,2:16384:8:128,4:32768:4:16
timeout 200 python3 -m verify_tools.bench --tree-ab base="$R/.cache/base_csrc",asym="$R/.cache/asym_early" --ab-kv bf16 --ab-gb-trees cur \
  --ab-reps 3 --ab-configs sm90wg --shapes $SH --ab-out "$OUT/ab_bf16.json" >/dev/null 2>>"$L"; echo "ab bf16 rc=$?" | tee -a "$L"
python3 - "$OUT/ab_bf16.json" <<'PY' 2>&1 | tee -a "$L"
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["ab"]:
    print(f"B={r['B']} L={r['L']} n={r['n']} H={r['H']}: {r['us']} over shipped {r.get('ratio_over_base')} bitwise {r.get('bitwise_equal_base')}")
g = [r for r in d["graph_buffer"] if r["tree"] == "cur"]
print("cur graph-buffer", [(r["max_bs"], r["L"], round(r["ratio"], 3)) for r in g], "all bitwise", all(r["replay_equal_exact_bitwise"] for r in g))
PY
say ab
timeout 60 python3 ../tests/device/cold_code.py 1:4096:8:16,8:32768:8:16 --tree base="$R/.cache/base_csrc" --out "$OUT/cold_code.json" 2>>"$L" | tee -a "$L"
timeout 120 python3 -m verify_tools.parity --json --configs all > "$OUT/parity_full.json" 2>>"$L"; echo "parity rc=$?" | tee -a "$L"
python3 -c "import json; d=json.load(open('$OUT/parity_full.json')); print(d.get('summary'))" 2>&1 | tee -a "$L"
timeout 80 compute-sanitizer --tool memcheck --print-limit 4 --log-file /tmp/san.log python3 -m verify_tools.parity --json --configs sm90wg --cases b4_varlen_tree_h16 > /tmp/san.json 2>/dev/null
echo "memcheck rc=$? | $(grep 'ERROR SUMMARY' /tmp/san.log | head -1)" | tee -a "$L"
cd "$R" || exit 2
timeout 150 python3 -m pytest -q tests/kernels/test_kernel_gpu_parity.py -p no:cacheprovider 2>&1 | tail -3 | tee -a "$L"
say done

#!/usr/bin/env bash
# Session 26 call 2 (carry .cache/s26_pb2: kernels/mla_verify/csrc at ef6e879 with MLAV_PART_BF16=1, call 1's pb2).
# 1. The shipped staged epilogue as committed (MLAV_PART_BF16=1 the default, the unaligned-output branch gone, write_rows
#    and stage_rows_bf16 sharing row_sum / row_inv / put_split_lse; every other kernel's SASS byte-identical) against
#    call 1's pb2. 2. The ASYM consumers by grid size: MLAV_ASYM_MIN_CTAS=16 (auto16: ASYM where B x m_tiles >= 16,
#    host sizes only) and ASYM forced (MLAV_WS=2), on batched shapes short and long, with graph-buffer rows of cur and
#    auto16. 3. auto16 in the working tree: full parity, GPU pytest, memcheck and racecheck on cases it runs ASYM in.
set -o pipefail
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1
R=$PWD; L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a "$L"; }
C=kernels/mla_verify/csrc
rm -rf /tmp/base /tmp/cur /tmp/asym /tmp/auto16
cp -r .cache/s26_pb2 /tmp/base && cp -r $C /tmp/cur && cp -r $C /tmp/asym && cp -r $C /tmp/auto16
sed -i 's/^#define MLAV_WS 1$/#define MLAV_WS 2/' /tmp/asym/mla_verify.cu
for d in /tmp/auto16 $C; do sed -i 's/^#define MLAV_ASYM_MIN_CTAS 0$/#define MLAV_ASYM_MIN_CTAS 16/' $d/mla_verify.cu; done
echo "asym $(grep -c '^#define MLAV_WS 2$' /tmp/asym/mla_verify.cu) auto16 $(grep -c '^#define MLAV_ASYM_MIN_CTAS 16$' /tmp/auto16/mla_verify.cu $C/mla_verify.cu | tr '\n' ' ')" | tee -a "$L"
export PYTHONPATH=$R/kernels:$R
for t in /tmp/base /tmp/cur /tmp/asym /tmp/auto16; do
  python3 -c "import sys; from verify_tools.bench import load_tree; load_tree('sm_90a', sys.argv[1])" "$t" >>"$L" 2>&1 &
done
python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1 &
wait; say built
cd kernels || exit 2
SH=1:4096:8:16,1:32768:8:16,1:131072:8:16,4:131072:4:16,4:8192:8:16,8:512:8:16,8:2048:8:16,8:8192:8:16,8:32768:8:16
SH=$SH,16:4096:4:16,16:32768:4:16,32:512:8:16,32:2048:8:16,32:8192:8:16,2:1024:8:128,2:16384:8:128
timeout 300 python3 -m verify_tools.bench --tree-ab base=/tmp/base,cur=/tmp/cur,asym=/tmp/asym,auto16=/tmp/auto16 --ab-kv bf16 \
  --ab-gb-trees cur,auto16 --ab-reps 3 --ab-configs sm90wg --shapes $SH --ab-out "$OUT/ab_bf16.json" >/dev/null 2>>"$L"
echo "ab rc=$?" | tee -a "$L"
python3 - "$OUT/ab_bf16.json" <<'PY' 2>&1 | tee -a "$L"
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["ab"]:
    print(f"B={r['B']} L={r['L']} n={r['n']} H={r['H']}: {r['us']} over base {r.get('ratio_over_base')}")
for t in ("cur", "auto16"):
    g = [r for r in d.get("graph_buffer", []) if r["tree"] == t]
    print(t, "graph-buffer", [(r["max_bs"], r["L"], round(r["ratio"], 3)) for r in g], "all bitwise", all(r["replay_equal_exact_bitwise"] for r in g))
PY
say ab
timeout 100 python3 -m verify_tools.parity --json --configs all > "$OUT/parity_auto16.json" 2>>"$L"; echo "parity rc=$?" | tee -a "$L"
python3 -c "import json; d=json.load(open('$OUT/parity_auto16.json')); print(d.get('summary'))" 2>&1 | tee -a "$L"
(cd "$R" && timeout 60 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_kernel_gpu_parity.py 2>&1 | tail -2 | tee -a "$L")
say parity
timeout 90 compute-sanitizer --tool memcheck --print-limit 8 --log-file "$OUT/san_memcheck.log" python3 -m verify_tools.parity --json \
  --configs sm90wg --cases b8_shared_prefix_tree_h16,b32_chain_n8_h16_prefix1k,b2_n16_h128_tree_prefix3k > /tmp/m.json 2>/dev/null
echo "memcheck rc=$? | $(grep -v '^=========     ' "$OUT/san_memcheck.log" | tail -3 | tr '\n' ' ' | cut -c1-400)" | tee -a "$L"
say memcheck
timeout 200 compute-sanitizer --tool racecheck --print-limit 8 --log-file "$OUT/san_racecheck.log" python3 -m verify_tools.parity --json \
  --configs sm90wg --cases b8_shared_prefix_tree_h16 > /tmp/r.json 2>/dev/null
echo "racecheck rc=$? | $(grep -v '^=========     ' "$OUT/san_racecheck.log" | head -6 | tr '\n' ' ' | cut -c1-600)" | tee -a "$L"
say done

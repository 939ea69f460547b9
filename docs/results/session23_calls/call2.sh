#!/usr/bin/env bash
# Session 23 call 2. Call 1 found: synccheck clean on ASYM with mbarrier handoffs, racecheck still flagging the final
# handoff (m_fin / row sums across consumer_sync); and a cold-code cost (tests/device/cold_code.py: L2 flush, then a
# warm-up replay of the same kernels on other buffers) of 2.5 us for ASYM and 710ddf3's combined kernel at B=1 L=4k
# against 0.3 us for the shipped kernel. Their producers' code sits 68 / 111 KB from the entry (shipped: 51 KB), and
# the trace put the ASYM producer's first issue ~2,400 cycles later than the shipped one's.
# Trees (carried): base = HEAD's csrc; late = HEAD + asym_mbar_handoff.patch + the final handoff as an mbarrier
# (fin), MLAV_WS=2; ship_early = the checkout's csrc with MLAV_WS=1 (Q and tile 0 issued before the init barrier, in
# code near the entry; session 21 measured this for the shipped kernel at 1.036x at B=1 L=4k); cur = the checkout
# built with MLAV_WS=2 (ASYM + fin + the early issue). Order: synccheck, racecheck (cur), A/B, cold code, parity,
# memcheck, trace, then the sparse kernel's cold-code cost (cold_code.py --dsa). Run from the repository root; carry .cache/base_csrc .cache/asym_late .cache/ship_early.
set -o pipefail
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1
R=$PWD; L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a "$L"; }
sed -i 's/#define MLAV_WS 1/#define MLAV_WS 2/' kernels/mla_verify/csrc/mla_verify.cu
grep -c "define MLAV_WS 2" kernels/mla_verify/csrc/mla_verify.cu | tee -a "$L"
export PYTHONPATH=$R/kernels:$R
python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1 &
for t in base_csrc asym_late ship_early; do
  python3 -c "import sys; from verify_tools.bench import load_tree; load_tree('sm_90a', sys.argv[1])" "$R/.cache/$t" >>"$L" 2>&1 &
done
wait; say built
cd kernels || exit 2
for tool in synccheck racecheck; do
  timeout 120 compute-sanitizer --tool $tool --print-limit 8 --log-file /tmp/san.log python3 -m verify_tools.parity --json --configs sm90wg --cases b4_varlen_tree_h16 > /tmp/san.json 2>/dev/null
  echo "$tool rc=$? | $(grep -v '^=========     ' /tmp/san.log | head -6 | tr '\n' ' ' | cut -c1-600) | $(python3 -c "import json; d=json.load(open('/tmp/san.json')); print([(c['name'], c['ok']) for c in d['cases']])" 2>&1 | tail -1)" | tee -a "$L"
  cp /tmp/san.log "$OUT/san_$tool.log"
done
SH=1:4096:8:16,1:8192:8:16,1:16384:8:16,1:32768:8:16,1:131072:8:16,4:131072:4:16,8:32768:8:16,32:8192:8:16,2:16384:8:128
timeout 240 python3 -m verify_tools.bench --tree-ab base="$R/.cache/base_csrc",late="$R/.cache/asym_late" --ab-kv bf16 --ab-gb-trees cur \
  --ab-reps 3 --ab-configs sm90wg --shapes $SH --ab-out "$OUT/ab_bf16.json" >/dev/null 2>>"$L"; echo "ab bf16 rc=$?" | tee -a "$L"
python3 - "$OUT/ab_bf16.json" <<'PY' 2>&1 | tee -a "$L"
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["ab"]:
    print(f"B={r['B']} L={r['L']} n={r['n']} H={r['H']}: {r['us']} over shipped {r.get('ratio_over_base')} bitwise {r.get('bitwise_equal_base')}")
g = [r for r in d["graph_buffer"] if r["tree"] == "cur"]
print("cur graph-buffer", [(r["max_bs"], r["L"], round(r["ratio"], 3)) for r in g], "all bitwise", all(r["replay_equal_exact_bitwise"] for r in g))
PY
timeout 120 python3 ../tests/device/cold_code.py 1:4096:8:16,1:8192:8:16,1:32768:8:16 --tree base="$R/.cache/base_csrc" --tree late="$R/.cache/asym_late" --tree ship_early="$R/.cache/ship_early" --out "$OUT/cold_code.json" 2>>"$L" | tee -a "$L"
timeout 150 python3 -m verify_tools.parity --json --configs all > "$OUT/parity_full.json" 2>>"$L"; echo "parity rc=$?" | tee -a "$L"
python3 -c "import json; d=json.load(open('$OUT/parity_full.json')); print(d.get('summary'))" 2>&1 | tee -a "$L"
timeout 90 compute-sanitizer --tool memcheck --print-limit 4 --log-file /tmp/san.log python3 -m verify_tools.parity --json --configs sm90wg --cases b4_varlen_tree_h16 > /tmp/san.json 2>/dev/null
echo "memcheck rc=$? | $(grep 'ERROR SUMMARY' /tmp/san.log | head -1)" | tee -a "$L"
timeout 60 python3 ../tests/device/dense_trace.py 1:8192:8:16 --out "$OUT/trace_cur.json" 2>>"$L" | grep "^\[trace\]" | tee -a "$L"
timeout 90 python3 ../tests/device/cold_code.py 1:32768:4:8,1:32768:4:64,8:32768:8:8 --dsa --out "$OUT/dsa_cold_code.json" 2>>"$L" | tee -a "$L"
say done

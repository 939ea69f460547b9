#!/usr/bin/env bash
# Session 26 call 5 (carry .cache/s26_ef_pb0 = kernels/mla_verify/csrc at ef6e879, fp32 partials, as committed then).
# Call 4's phase-2 bench read the B=1 L=4k graph-buffer row at 1.103 (over the 1.1 gate): with the staged epilogue the
# exact-length call got faster and the max-sized-buffer replay did not. The working tree now launches the staged
# kernel only from 4 CTAs per split (MLAV_STAGE_MIN_CTAS), write_rows below (B=1 n=8 H=16: 2 CTAs). Its unstaged MODE 0
# SASS differs from ef6e879's in the epilogue's schedule (same instruction count), the staged and ASYM kernels are
# byte-identical to 942674e's. A/B against ef6e879 with both trees' graph-buffer rows, full parity, GPU pytest,
# racecheck and memcheck on a case that runs the unstaged MODE 0 (b1_full_nomask_h16: 2 CTAs per split).
set -o pipefail
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1
R=$PWD; L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a "$L"; }
rm -rf /tmp/base /tmp/cur && cp -r .cache/s26_ef_pb0 /tmp/base && cp -r kernels/mla_verify/csrc /tmp/cur
export PYTHONPATH=$R/kernels:$R
for t in /tmp/base /tmp/cur; do
  python3 -c "import sys; from verify_tools.bench import load_tree; load_tree('sm_90a', sys.argv[1])" "$t" >>"$L" 2>&1 &
done
python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1 &
wait; say built
cd kernels || exit 2
SH=1:512:8:16,1:4096:8:16,1:32768:8:16,1:131072:8:16,1:32768:16:16,4:4096:4:16,4:32768:4:16,8:32768:8:16
timeout 200 python3 -m verify_tools.bench --tree-ab base=/tmp/base,cur=/tmp/cur --ab-kv bf16 --ab-gb-trees base,cur \
  --ab-reps 3 --ab-configs sm90wg --shapes $SH --ab-out "$OUT/ab_bf16.json" >/dev/null 2>>"$L"
echo "ab rc=$?" | tee -a "$L"
python3 - "$OUT/ab_bf16.json" <<'PY' 2>&1 | tee -a "$L"
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["ab"]:
    print(f"B={r['B']} L={r['L']} n={r['n']} H={r['H']}: {r['us']} over base {r.get('ratio_over_base')}")
g = {(r["tree"], r["max_bs"], r["L"]): r for r in d.get("graph_buffer", [])}
for t in ("base", "cur"):
    rows = [r for k, r in g.items() if k[0] == t]
    print(t, "graph-buffer", [(r["max_bs"], r["L"], round(r["ratio"], 3)) for r in rows], "all bitwise", all(r["replay_equal_exact_bitwise"] for r in rows))
print("cur/base replay", [(b, L, round(r["graph_buffer_us"] / g[("base", b, L)]["graph_buffer_us"], 3)) for (t, b, L), r in g.items() if t == "cur"])
PY
say ab
timeout 100 python3 -m verify_tools.parity --json --configs all > "$OUT/parity.json" 2>>"$L"; echo "parity rc=$?" | tee -a "$L"
python3 -c "import json; d=json.load(open('$OUT/parity.json')); print(d.get('summary'))" 2>&1 | tee -a "$L"
(cd "$R" && timeout 60 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_kernel_gpu_parity.py 2>&1 | tail -2 | tee -a "$L")
say parity
timeout 90 compute-sanitizer --tool memcheck --print-limit 8 --log-file "$OUT/san_memcheck.log" python3 -m verify_tools.parity --json \
  --configs sm90wg --cases b1_full_nomask_h16,b1_prefix0_n4_h16_tree,b1_n1_h128_prefix4k > /tmp/m.json 2>/dev/null
echo "memcheck rc=$? | $(grep -v '^=========     ' "$OUT/san_memcheck.log" | tail -3 | tr '\n' ' ' | cut -c1-400)" | tee -a "$L"
timeout 150 compute-sanitizer --tool racecheck --print-limit 8 --log-file "$OUT/san_racecheck.log" python3 -m verify_tools.parity --json \
  --configs sm90wg --cases b1_full_nomask_h16 > /tmp/r.json 2>/dev/null
echo "racecheck rc=$? | $(grep -v '^=========     ' "$OUT/san_racecheck.log" | head -6 | tr '\n' ' ' | cut -c1-600)" | tee -a "$L"
say done

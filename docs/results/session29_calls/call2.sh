#!/usr/bin/env bash
# Session 29, call 2 (carry .abbase = HEAD's kernels/mla_verify/csrc before the change; ~6 min).
# The change: the combine issues this warp's first combine_prefetch<W, BF16, GS>() partials together with the lse
# loads (9 for the B=1 grid's combine<8> on bf16 partials: S = 65 merges after one L2 round trip instead of ~4), the
# lse values reach the accumulation through shared memory. Same splits, same order, same arithmetic -> outputs bitwise
# equal to base. Session 28's CUPTI (PDL off, H100): the combine alone is 6.2 µs at B=1 n=8 H=16 L=4k of 21.4.
# Prediction: B=1 L=4k -0.7..-1.5 µs (0.93-0.97x), B=1 32k 0.97-0.99x, batched shapes 0.99-1.01; graph-buffer rows
# no worse; all bitwise equal to base. Decision: ship if bitwise everywhere, parity 100%, sanitizers clean and no
# shape slower than 1.01x. Then tests/device/cold_code.py --graph-buffer: is the graph-buffer gap (the device rule,
# call 1) the first fetch of the rule's code after the L2 flush? (warm-code gb / exact near 1.0 -> yes)
set -o pipefail
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1
R=$PWD; L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a "$L"; }
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader | tee -a "$L"
rm -rf /tmp/base && cp -r .abbase/kernels/mla_verify/csrc /tmp/base
diff -q /tmp/base/mla_verify_kernel.cuh kernels/mla_verify/csrc/mla_verify_kernel.cuh | tee -a "$L"
export PYTHONPATH=$R/kernels:$R
python3 -c "import sys; from verify_tools.bench import load_tree; load_tree('sm_90a', sys.argv[1])" /tmp/base >>"$L" 2>&1 &
python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1 &
wait; say built
cd kernels || exit 2
SH=1:512:8:16,1:4096:8:16,1:32768:8:16,1:131072:8:16,4:4096:4:16,4:131072:4:16,8:32768:8:16,32:8192:8:16,2:16384:8:128
timeout 200 python3 -m verify_tools.bench --tree-ab base=/tmp/base --ab-kv bf16 --ab-gb-trees cur,base --ab-reps 3 \
  --shapes $SH --ab-out "$OUT/ab_bf16.json" >/dev/null 2>>"$L"
echo "ab bf16 rc=$?" | tee -a "$L"
timeout 80 python3 -m verify_tools.bench --tree-ab base=/tmp/base --ab-kv fp8 --ab-gb-trees none --ab-reps 3 \
  --shapes 1:4096:8:16,1:32768:8:16,4:131072:4:16,8:32768:8:16 --ab-out "$OUT/ab_fp8.json" >/dev/null 2>>"$L"
echo "ab fp8 rc=$?" | tee -a "$L"
python3 - "$OUT/ab_bf16.json" "$OUT/ab_fp8.json" <<'PY' 2>&1 | tee -a "$L"
import json, sys
for f in sys.argv[1:]:
    try:
        d = json.load(open(f))
    except Exception as e:
        print(f, "unreadable", e); continue
    print(f.rsplit("/", 1)[-1], "kv", d.get("kv"))
    for r in d["ab"]:
        print(f"  B={r['B']} L={r['L']} n={r['n']} H={r['H']}: {r['us']} cur/base {r['ratio_over_base']['cur']} bitwise {r['bitwise_equal_base']['cur']}")
    g = {(r["tree"], r["max_bs"], r["L"]): r for r in d.get("graph_buffer", [])}
    for t in ("cur", "base"):
        rows = [r for k, r in g.items() if k[0] == t]
        if rows:
            print(" ", t, "graph-buffer", [(r["max_bs"], r["L"], round(r["ratio"], 3)) for r in rows], "all bitwise", all(r["replay_equal_exact_bitwise"] for r in rows))
    if g:
        print("  cur/base replay", [(b, L, round(r["graph_buffer_us"] / g[("base", b, L)]["graph_buffer_us"], 3)) for (t, b, L), r in g.items() if t == "cur"])
    for c in d.get("cupti", []):
        print("  cupti", c["tree"], c["B"], c["L"], c["kernels_us"])
PY
say ab
timeout 100 python3 ../tests/device/cold_code.py 1:4096:8:16,1:512:8:16 --graph-buffer --out "$OUT/cold_gb.json" 2>&1 | grep "^\[cold\]" | tee -a "$L"
say cold
timeout 110 python3 -m verify_tools.parity --json --configs all > "$OUT/parity.json" 2>>"$L"; echo "parity rc=$?" | tee -a "$L"
python3 -c "import json; d=json.load(open('$OUT/parity.json')); print(d.get('summary'))" 2>&1 | cut -c1-400 | tee -a "$L"
(cd "$R" && timeout 60 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_kernel_gpu_parity.py 2>&1 | tail -2 | tee -a "$L")
say parity
timeout 90 compute-sanitizer --tool memcheck --print-limit 8 --log-file "$OUT/san_memcheck.log" python3 -m verify_tools.parity --json \
  --cases b1_full_nomask_h16,fp8_b4_varlen_tree_h16_u8,graph_b3_varlen_n4_h16 > /tmp/m.json 2>/dev/null
echo "memcheck rc=$? | $(grep -v '^=========     ' "$OUT/san_memcheck.log" | tail -3 | tr '\n' ' ' | cut -c1-400)" | tee -a "$L"
timeout 120 compute-sanitizer --tool racecheck --print-limit 8 --log-file "$OUT/san_racecheck.log" python3 -m verify_tools.parity --json \
  --cases b1_full_nomask_h16,fp8_b4_varlen_tree_h16_u8 > /tmp/r.json 2>/dev/null
echo "racecheck rc=$? | $(grep -v '^=========     ' "$OUT/san_racecheck.log" | head -6 | tr '\n' ' ' | cut -c1-600)" | tee -a "$L"
say done

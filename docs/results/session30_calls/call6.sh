#!/usr/bin/env bash
# Session 30, call 6 (carry .abbase; ~3 min): the combine prefetch on the H200 (issue 13's card): same-process A/B
# against the tree before (bf16 with graph-buffer rows, fp8), then the bench's own rows (SOL %, fp8 / bf16) on the
# anchor shapes of the issue, no peers.
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1
R=$PWD; L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a "$L"; }
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader | tee -a "$L"
export PYTHONPATH=$R/kernels:$R
rm -rf /tmp/base && cp -r .abbase/kernels/mla_verify/csrc /tmp/base
python3 -c "import sys; from verify_tools.bench import load_tree; load_tree('sm_90a', sys.argv[1])" /tmp/base >>"$L" 2>&1 &
python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1 &
wait; say built
cd kernels || exit 2
timeout 150 python3 -m verify_tools.bench --tree-ab base=/tmp/base --ab-kv bf16 --ab-gb-trees cur,base --ab-reps 3 \
  --shapes 1:512:8:16,1:4096:8:16,1:32768:8:16,1:131072:8:16,4:4096:4:16,4:131072:4:16,8:32768:8:16,32:8192:8:16 \
  --ab-out "$OUT/ab_bf16.json" >/dev/null 2>>"$L"; echo "ab bf16 rc=$?" | tee -a "$L"
timeout 80 python3 -m verify_tools.bench --tree-ab base=/tmp/base --ab-kv fp8 --ab-gb-trees none --ab-reps 3 \
  --shapes 1:4096:8:16,1:32768:8:16,4:131072:4:16,4:4096:4:16 --ab-out "$OUT/ab_fp8.json" >/dev/null 2>>"$L"
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
PY
say ab
timeout 150 python3 -m verify_tools.bench --json --no-sglang --no-flashmla --no-graph-buffer --fp8 \
  --shapes 1:4096:8:16,1:32768:8:16,1:131072:8:16,4:131072:4:16,8:32768:8:16,32:8192:8:16 > "$OUT/bench.json" 2>>"$L"
echo "bench rc=$?" | tee -a "$L"
python3 - "$OUT/bench.json" <<'PY' 2>&1 | tee -a "$L"
import json, sys
d = json.load(open(sys.argv[1]))
print(d.get("device"), d.get("ceilings"))
for r in d["rows"]:
    print({k: r.get(k) for k in ("B", "L", "n", "H", "kv", "new_us", "floor_us", "sol_pct", "num_splits")})
print(d["summary"])
PY
say done

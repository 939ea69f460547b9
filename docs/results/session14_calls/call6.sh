#!/usr/bin/env bash
# session 14 call 6: dense split rule, three trees in one process: cur (d455fff: the parameter terms pinned
# ahead of the kv_indptr loads' use), nopin (the same without the pin: the compiler sinks them past the
# shortcut) and base (the previous rule)
set -o pipefail
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1
R=$PWD; cd kernels; export PYTHONPATH=$PWD:$R
L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a "$L"; }
ARCH=sm_90a
python3 -c "from mla_verify._build import load; load('$ARCH')" >>"$L" 2>&1 &
python3 -c "from verify_tools.bench import load_tree; load_tree('$ARCH', '$R/.oldrule/kernels/mla_verify/csrc')" >>"$L" 2>&1 &
python3 -c "from verify_tools.bench import load_tree; load_tree('$ARCH', '$R/.nopin/kernels/mla_verify/csrc')" >>"$L" 2>&1 &
wait; say built
timeout 230 python3 -m verify_tools.bench --tree-ab base=$R/.oldrule/kernels/mla_verify/csrc,nopin=$R/.nopin/kernels/mla_verify/csrc \
  --ab-gb-trees cur,base,nopin --shapes 1:4096:8:16,1:32768:8:16 --ab-out "$OUT/ab.json" >/dev/null 2>>"$L"
echo "ab rc=$?" | tee -a "$L"
python3 - "$OUT/ab.json" <<'PY' 2>&1 | tee -a "$L"
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["ab"]:
    print(f"exact B={r['B']} L={r['L']}: us {r['us']} over base {r.get('ratio_over_base')} bitwise {r.get('bitwise_equal_base')}")
rows = {}
for r in d["graph_buffer"]:
    rows.setdefault((r["max_bs"], r["n"], r["H"], r["L"]), {})[r["tree"]] = r
for key, t in sorted(rows.items()):
    print(f"B={key[0]} n={key[1]} L={key[3]}: " + " | ".join(
        f"{k} {r['graph_buffer_us']:.2f}/{r['exact_us']:.2f}={r['ratio']:.3f} bw {r['replay_equal_exact_bitwise']}" for k, r in sorted(t.items())))
for k in ("cur", "nopin", "base"):
    g = [r for r in d["graph_buffer"] if r["tree"] == k]
    print(k, "max ratio", max(r["ratio"] for r in g), "sum replay us", round(sum(r["graph_buffer_us"] for r in g), 2),
          "sum exact us", round(sum(r["exact_us"] for r in g), 2), "bitwise", sum(r["replay_equal_exact_bitwise"] for r in g), "/", len(g))
PY
say done

#!/usr/bin/env bash
# Session 14, dense: the split rule's fast path (this checkout, tree "cur") against the previous rule
# (tree "base" = .oldrule, `git archive 34bdce7 kernels/mla_verify/csrc | tar -x -C .oldrule`) in one
# process: graph-buffer rows of both trees (the rule runs only there), the B=1 4k / 32k exact-buffer rows
# (the rule is skipped there: both trees must give the same bits), CUPTI spans; then the parity of the
# CUDA-graph replay cases (each replay bitwise equal to an eager call with the derived split count).
# Run from the repository root with $OUT set; carry .calls and .oldrule. Writes log.txt, ab.json,
# parity_graph.json under $OUT. About 3.5 min on an H200 (two JIT builds in parallel ~40 s, A/B ~150 s,
# parity ~40 s).
set -o pipefail
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1
R=$PWD
cd kernels || exit 2
export PYTHONPATH=$PWD:$R
L=$OUT/log.txt
say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a "$L"; }
OLD=$R/.oldrule/kernels/mla_verify/csrc
say "host: $(nvidia-smi -L 2>&1 | head -1); checkout $(git -C "$R" rev-parse --short HEAD 2>/dev/null) + work tree"
if [ ! -f "$OLD/mla_verify_kernel.cuh" ] || grep -q floor_div_rcp "$OLD/mla_verify_kernel.cuh" ||
  ! grep -q floor_div_rcp mla_verify/csrc/mla_verify_kernel.cuh; then
  say "wrong trees: .oldrule must hold the previous rule (carry it), the checkout the new one"
  exit 2
fi
ARCH=$(python3 -c "import torch; from mla_verify._build import arch_for_capability as f; print(f(*torch.cuda.get_device_capability()))")
say "JIT builds of cur and base ($ARCH), in parallel"
python3 -c "from mla_verify._build import load; load('$ARCH')" >>"$L" 2>&1 &
python3 -c "from verify_tools.bench import load_tree; load_tree('$ARCH', '$OLD')" >>"$L" 2>&1 &
wait
say "built"

say "A/B cur vs base: 2 exact rows, 12 graph-buffer rows per tree, CUPTI (limit 170 s)"
timeout 170 python3 -m verify_tools.bench --tree-ab base="$OLD" --ab-gb-trees cur,base \
  --shapes 1:4096:8:16,1:32768:8:16 --ab-out "$OUT/ab.json" >/dev/null 2>>"$L"
echo "ab rc=$?" | tee -a "$L"
python3 - "$OUT/ab.json" <<'PY' 2>&1 | tee -a "$L"
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["ab"]:
    print(f"exact B={r['B']} L={r['L']} n={r['n']} H={r['H']}: us {r['us']} over base {r.get('ratio_over_base')} "
          f"bitwise {r.get('bitwise_equal_base')}")
rows = {}
for r in d["graph_buffer"]:
    rows.setdefault((r["max_bs"], r["n"], r["H"], r["L"]), {})[r["tree"]] = r
print("graph-buffer rows: replay / exact-length call (us) = ratio, bitwise(replay == exact), S grid/eff; cur vs base")
for (B, n, H, Lr), t in sorted(rows.items()):
    line = f"B={B} n={n} H={H} L={Lr}:"
    for k in ("cur", "base"):
        if k in t:
            r = t[k]
            line += (f" | {k} {r['graph_buffer_us']:.2f} / {r['exact_us']:.2f} = {r['ratio']:.3f} "
                     f"bitwise {r['replay_equal_exact_bitwise']} S {r['splits_graph_buffer']}/{r['splits_effective']}")
    if "cur" in t and "base" in t:
        line += f" | replay cur/base {t['cur']['graph_buffer_us'] / t['base']['graph_buffer_us']:.3f}"
    print(line)
for (B, n, H, Lr), t in sorted(rows.items()):
    if (B, Lr) == (1, 4096):
        for k, r in t.items():
            print(f"CUPTI B=1 L=4096 {k}: {json.dumps(r.get('kernels_us'))}")
for r in d["cupti"]:
    print(f"CUPTI eager {r['tree']} B={r['B']} L={r['L']}: {r['kernels_us']}")
cur = [r["ratio"] for r in d["graph_buffer"] if r["tree"] == "cur"]
base = [r["ratio"] for r in d["graph_buffer"] if r["tree"] == "base"]
print(f"max ratio cur {max(cur, default=float('nan')):.3f} base {max(base, default=float('nan')):.3f}; "
      f"bitwise cur {sum(r['replay_equal_exact_bitwise'] for r in d['graph_buffer'] if r['tree'] == 'cur')}/{len(cur)}")
PY

say "parity: the CUDA-graph replay cases, every config (limit 100 s)"
timeout 100 python3 -m verify_tools.parity --json --cases graph_b1_n8_h16_32k,graph_b3_varlen_n4_h16,graph_fp8_b2_n8_h16 \
  >"$OUT/parity_graph.json" 2>>"$L"
echo "parity rc=$?" | tee -a "$L"
python3 - "$OUT/parity_graph.json" <<'PY' 2>&1 | tee -a "$L"
import json, sys
d = json.load(open(sys.argv[1]))
print("parity ok", d.get("ok"), d.get("summary"))
for r in d.get("graph_replays", []):
    if not r["ok"] or not r["equal_eager_same_splits"]:
        print("FAIL", {k: r.get(k) for k in ("name", "tile_config", "replay_lens", "splits_grid", "splits_effective",
                                             "equal_eager_same_splits", "equal_eager_auto", "rel_err")})
PY
say "done"

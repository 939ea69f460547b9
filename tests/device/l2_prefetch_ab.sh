#!/usr/bin/env bash
# Session 10 A/B (run from the repository root on the GPU machine; results under $OUT):
# 1. DSA: parity of w64p (w64 + an L2 bulk prefetch of the tile after the next; experimental build)
#    on every bf16 case incl. graph replay; dsa_bench w64p beside auto (w64 for H >= 64) on H=64 / 128
#    shapes; dsa_bench w64 beside auto (m64 / m16) on H=32 and H=16 shapes (is w64 the better auto there?).
# 2. Dense: bench --tree-ab cur vs PF_TREE (a csrc copy with MLAV_L2_PREFETCH=1), sm90wg, AB_SHAPES.
set -o pipefail
OUT=${OUT:-/tmp/pf_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/kernels:$PWD ORCHESTRATOR_KERNEL_CACHE=/tmp/pf_kc
cd kernels || exit 1
t0=$(date +%s)
timeout 200 python3 -m verify_tools.dsa_parity --json --no-peer --configs w64p --out "$OUT/dsa_parity_w64p.json" > /dev/null 2> /tmp/pf_parity.err
echo "parity w64p rc=$? ($(( $(date +%s) - t0 )) s)"; tail -3 /tmp/pf_parity.err
bench() {  # name alt shapes
  timeout 150 python3 -m verify_tools.dsa_bench --quick --no-sglang --shapes "$3" --reps 20 --alt-config "$2" --out "$OUT/dsa_bench_$1.json" > /dev/null 2> "/tmp/pf_$1.err"
  echo "bench $1 rc=$? ($(( $(date +%s) - t0 )) s)"; grep -v -i warn "/tmp/pf_$1.err" | tail -3
  python3 - "$OUT/dsa_bench_$1.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["rows"]:
    if r["kv"] != "bf16":
        continue
    a = r.get("alt", {})
    print(f"B={r['B']} n={r['n']} H={r['H']} T={r['T']} auto={r['config']} S={r['splits']} us={r.get('ours_s', float('nan'))*1e6:.1f} "
          f"sol={r.get('sol', float('nan')):.3f} alt={a.get('config')} S={a.get('splits')} alt/auto={a.get('time_over_auto', float('nan')):.3f} "
          f"diff={a.get('max_abs_diff_vs_ours')} {a.get('error', '')[:100]}")
PY
}
bench w64p w64p 32:32768:8:64,8:32768:8:64,1:32768:4:64,2:32768:4:128,8:32768:8:128
bench w64_h32_h16 w64 32:32768:8:32,8:32768:8:32,1:32768:4:32,32:32768:8:16,1:32768:4:16
timeout 420 python3 -m verify_tools.bench --tree-ab "pf=../${PF_TREE:-.pfvar/csrc}" --ab-configs sm90wg --ab-gb-trees none \
  --ab-out "$OUT/dense_ab_pf.json" > /dev/null 2> >(grep "^\[ab\]" >&2)
echo "dense ab rc=$? ($(( $(date +%s) - t0 )) s)"

#!/usr/bin/env bash
# Ran at ed08bb4; the cluster sources were removed after call 3 (637fb63), so this script needs that commit's tree.
# Session 25, device call 3: why call 2's cluster merge was slower (its split kernel 17.7-19.1 us vs 12.8 at B=1 L=4k,
# CUPTI). Trees: base (the checkout, MLAV_CLUSTER=1), cl4 (the merge, C = 4), cl4nm / cl2nm (the cluster launch with
# C = 4 / 2 and no merge: every split writes its partial, -DMLAV_CLUSTER_NOMERGE=1), so the launch's cost and the
# merge's separate. MLAV_CLUSTER_DEBUG=1 prints the resident clusters and the split count each launch chose. Then the
# trace build's per-phase cycles (epilogue = the merge) of base and cl4 at B=1.
set -o pipefail
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1 MLAV_CLUSTER_DEBUG=1
R=$PWD; L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a "$L"; }
C=kernels/mla_verify/csrc
setm() { sed -i "s/^#define $2 [0-9]*/#define $2 $3/" "$1/mla_verify_kernel.cuh"; grep -c "^#define $2 $3" "$1/mla_verify_kernel.cuh"; }
rm -rf /tmp/base /tmp/cl4 /tmp/cl4nm /tmp/cl2nm
for t in base cl4 cl4nm cl2nm; do cp -r $C /tmp/$t; done
echo "$(setm /tmp/cl4 MLAV_CLUSTER 4) $(setm /tmp/cl4nm MLAV_CLUSTER 4) $(setm /tmp/cl4nm MLAV_CLUSTER_NOMERGE 1) $(setm /tmp/cl2nm MLAV_CLUSTER 2) $(setm /tmp/cl2nm MLAV_CLUSTER_NOMERGE 1)" | tee -a "$L"
export PYTHONPATH=$R/kernels:$R
python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1 &
for t in /tmp/base /tmp/cl4 /tmp/cl4nm /tmp/cl2nm; do
  python3 -c "import sys; from verify_tools.bench import load_tree; load_tree('sm_90a', sys.argv[1])" "$t" >>"$L" 2>&1 &
done
wait; say built
cd kernels || exit 2
SH=1:4096:8:16,1:32768:8:16,8:32768:8:16,4:131072:4:16
timeout 200 python3 -m verify_tools.bench --tree-ab base=/tmp/base,cl4=/tmp/cl4,cl4nm=/tmp/cl4nm,cl2nm=/tmp/cl2nm \
  --ab-kv bf16 --ab-gb-trees nothing --ab-reps 3 --ab-configs sm90wg --shapes $SH --ab-out "$OUT/ab_bf16.json" >/dev/null 2>>"$L"
echo "ab bf16 rc=$?" | tee -a "$L"
grep "^\[mlav\]" "$L" | sort | uniq -c | tee "$OUT/cluster_debug.txt"
python3 - "$OUT/ab_bf16.json" <<'PY' 2>&1 | tee -a "$L"
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["ab"]:
    print(f"B={r['B']} L={r['L']} n={r['n']} H={r['H']}: {r['us']} over base {r.get('ratio_over_base')}")
PY
grep "cupti" "$L" | tail -16
say ab
cd "$R"
timeout 120 python3 tests/device/dense_trace.py 1:4096:8:16,1:32768:8:16 --out "$OUT/trace_base.json" 2>&1 | tail -24 | tee -a "$L"
timeout 120 python3 tests/device/dense_trace.py 1:4096:8:16,1:32768:8:16 --define MLAV_CLUSTER=4 --out "$OUT/trace_cl4.json" 2>&1 | tail -24 | tee -a "$L"
say done

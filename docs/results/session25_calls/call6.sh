#!/usr/bin/env bash
# Session 25, device call 6 (the session's last device time): call 5's pb2 gained 0.947x at B=1 L=4k in the exact
# call, but its graph-buffer row was 22.56 us, as call 1's shipped kernel's (22.54): graph-buffer rows of base and pb2
# in one run decide whether the staged epilogue gains where SGLang runs verify (CUDA graphs). Then memcheck and
# racecheck of pb2 (the checkout rebuilt with MLAV_PART_BF16=1) on b4_varlen_tree_h16.
set -o pipefail
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1
R=$PWD; L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a "$L"; }
C=kernels/mla_verify/csrc
setm() { sed -i "s/^#define $2 [0-9]*/#define $2 $3/" "$1/mla_verify_kernel.cuh"; grep -c "^#define $2 $3" "$1/mla_verify_kernel.cuh"; }
rm -rf /tmp/base /tmp/pb2 && cp -r $C /tmp/base && cp -r $C /tmp/pb2
echo "pb2 $(setm /tmp/pb2 MLAV_PART_BF16 1)" | tee -a "$L"
export PYTHONPATH=$R/kernels:$R
for t in /tmp/base /tmp/pb2; do
  python3 -c "import sys; from verify_tools.bench import load_tree; load_tree('sm_90a', sys.argv[1])" "$t" >>"$L" 2>&1 &
done
(setm $C MLAV_PART_BF16 1 >/dev/null && python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1) &
wait; say built
cd kernels || exit 2
timeout 110 python3 -m verify_tools.bench --tree-ab base=/tmp/base,pb2=/tmp/pb2 \
  --ab-kv bf16 --ab-gb-trees base,pb2 --ab-reps 3 --ab-configs sm90wg --shapes 1:4096:8:16 --ab-out "$OUT/ab_gb.json" >/dev/null 2>>"$L"
echo "ab rc=$?" | tee -a "$L"
grep "graph-buffer base\|graph-buffer pb2" "$L" | tee -a "$OUT/gb_rows.txt"
say ab
for tool in memcheck racecheck; do
  timeout 75 compute-sanitizer --tool $tool --print-limit 8 --log-file /tmp/san.log python3 -m verify_tools.parity --json --configs sm90wg \
    --cases b4_varlen_tree_h16 > /tmp/san.json 2>/dev/null
  echo "$tool rc=$? | $(grep -v '^=========     ' /tmp/san.log | head -6 | tr '\n' ' ' | cut -c1-600) | $(python3 -c "import json; d=json.load(open('/tmp/san.json')); print([(c['name'], c['ok']) for c in d['cases']])" 2>&1 | tail -1)" | tee -a "$L"
done
say done

#!/usr/bin/env bash
# session 13 call 1: w64 load placement variants (parity, trace phases, A/B) + dense NORULE diagnostic
set -o pipefail
R=$PWD; cd kernels
export PYTHONPATH=$PWD:$R PYTHONUNBUFFERED=1 ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16
L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a $L; }
say "builds"
python3 -c "from dsa_verify._build import load_experimental as f; f('sm_90a')" >>$L 2>&1 &
python3 -c "from dsa_verify._build import load_trace as f; f('sm_90a')" >>$L 2>&1 &
python3 -c "from dsa_verify._build import load as f; f('sm_90a')" >>$L 2>&1 &
python3 -c "import torch; from verify_tools.bench import load_tree; load_tree('sm_90a', '$R/.norule/kernels/mla_verify/csrc')" >>$L 2>&1 &
python3 -c "from mla_verify._build import load as f; f('sm_90a')" >>$L 2>&1 &
wait; say "built"
timeout 150 python3 -m verify_tools.dsa_parity --json --out $OUT/parity.json --no-peer \
  --cases hostile_b2_n4_h64_bf16,b2_n4_h128_bf16,short_prefix_b3_n8_h16_bf16,glm5_b1_n4_h8_L32k_bf16 \
  --configs w64,w64l,w64p >/dev/null 2>>$L; echo "parity rc=$?" | tee -a $L
python3 -c "import json;d=json.load(open('$OUT/parity.json'));print(d.get('summary'));[print('FAIL',r) for r in d['cases'] if not r['ok']]" 2>&1 | tee -a $L
say "phases"
timeout 150 python3 -m verify_tools.dsa_bench --trace-phases --shapes 32:32768:8:64,8:32768:8:64 --reps 5 \
  --trace-configs w64,w64l,w64p --trace-kv bf16 > $OUT/phases.json 2>>$L; echo "phases rc=$?" | tee -a $L
for alt in w64l w64p; do
  say "ab $alt"
  timeout 120 python3 -m verify_tools.dsa_bench --shapes 32:32768:8:64,8:32768:8:64,8:32768:8:128,8:32768:8:32 \
    --reps 20 --alt-config $alt --no-sglang --no-flashmla --out $OUT/ab_$alt.json >/dev/null 2>>$L; echo "ab rc=$?" | tee -a $L
  python3 -c "import json, sys; from verify_tools.dsa_bench import _print_rows; d = json.load(open('$OUT/ab_$alt.json')); _print_rows(d)" 2>&1 | tee -a $L
done
say "dense norule"
timeout 150 python3 -m verify_tools.bench --tree-ab norule=$R/.norule/kernels/mla_verify/csrc --ab-gb-trees cur,norule \
  --shapes 1:4096:8:16,1:32768:8:16 --ab-out $OUT/dense_ab.json > /dev/null 2> >(grep "^\[ab\]" | tee -a $L >&2); echo "dense rc=$?" | tee -a $L
say done

#!/usr/bin/env bash
# session 13 call 6: the staged epilogue on S = 1 only: parity, A/B against w64d
set -o pipefail
R=$PWD; cd kernels
export PYTHONPATH=$PWD:$R PYTHONUNBUFFERED=1 ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16
L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a $L; }
python3 -c "from dsa_verify._build import load_experimental as f; f('sm_90a')" >>$L 2>&1 &
python3 -c "from dsa_verify._build import load as f; f('sm_90a')" >>$L 2>&1 &
wait; say "built"
timeout 90 python3 -m verify_tools.dsa_parity --json --out $OUT/parity.json --no-peer \
  --cases glm5_b1_n4_h8_L32k_bf16,glm5_b1_n4_h8_L32k_fp8,hostile_b2_n4_h64_bf16,hostile_b2_n4_h16_fp8,b2_n4_h128_bf16,b2_n4_h128_fp8,b8_n4_h64_fp8 \
  --configs auto,w64 >/dev/null 2>>$L; echo "parity rc=$?" | tee -a $L
python3 -c "import json;d=json.load(open('$OUT/parity.json'));print(d.get('summary'));[print('FAIL',r) for r in d['cases'] if not r['ok']]" 2>&1 | tee -a $L
timeout 90 python3 -m verify_tools.dsa_bench --shapes 32:32768:8:64,8:32768:8:128,8:32768:8:64,1:32768:4:64 \
  --reps 20 --alt-config w64d --no-sglang --no-flashmla --out $OUT/ab_w64d.json >/dev/null 2>>$L; echo "ab rc=$?" | tee -a $L
python3 -c "import json, sys; from verify_tools.dsa_bench import _print_rows; d = json.load(open('$OUT/ab_w64d.json')); _print_rows(d)" 2>&1 | tee -a $L
say done

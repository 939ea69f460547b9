#!/usr/bin/env bash
# Session 16 call 3: call 2 (session 15's call8.sh) hit "illegal memory access" in dsa_tree_ab under the sm_120
# occupancy emulation at B=1 n=4 H=16 fp8 (auto), tree unknown. Here: the shipped tree only (no switch), the DSA
# parity suite under the emulation (new flag --sm120-occupancy, every sm_120a config, graph replays), the new case
# dsv32_b1_n4_h16_L32k_fp8 natively on every config, then memcheck on any failing emulated case.
set -o pipefail
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1
R=$PWD; cd kernels || exit 2
export PYTHONPATH=$PWD:$R
L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a "$L"; }
python3 -c "from dsa_verify._build import load_experimental as f; f('sm_90a')" >>"$L" 2>&1 &
python3 -c "from dsa_verify._build import load as f; f('sm_90a')" >>"$L" 2>&1 &
wait; say built
summ() { python3 -c "
import json; d=json.load(open('$1')); print(d.get('summary'))
for r in d['cases']:
    if not r['ok']: print('FAIL', r.get('case'), r.get('config'), r.get('error', '')[:200], r.get('rel_fro'), r.get('token_exact'))" 2>&1 | tee -a "$L"; }
say "parity under the sm_120 emulation, the new case first"
timeout 120 python3 -m verify_tools.dsa_parity --json --out $OUT/p_emul_new.json --no-peer --no-graph --sm120-occupancy --configs all --cases dsv32_b1_n4_h16_L32k_fp8 >/dev/null 2>>"$L"
echo "rc=$?" | tee -a "$L"; summ $OUT/p_emul_new.json
timeout 240 python3 -m verify_tools.dsa_parity --json --out $OUT/p_emul.json --no-peer --sm120-occupancy --configs all >/dev/null 2>>"$L"
echo "rc=$?" | tee -a "$L"; summ $OUT/p_emul.json
say "new case natively, every config"
timeout 90 python3 -m verify_tools.dsa_parity --json --out $OUT/p_native_new.json --no-peer --configs all --cases dsv32_b1_n4_h16_L32k_fp8 >/dev/null 2>>"$L"
echo "rc=$?" | tee -a "$L"; summ $OUT/p_native_new.json
say "memcheck, emulated, new case, m16 + auto"
timeout 150 compute-sanitizer --tool memcheck --print-limit 6 --log-file /tmp/san.log python3 -m verify_tools.dsa_parity --sm120-occupancy --cases dsv32_b1_n4_h16_L32k_fp8 --configs auto,m16 --no-graph --no-peer --json > /tmp/san.json 2>/dev/null
echo "memcheck rc=$?" | tee -a "$L"; head -c 3000 /tmp/san.log | tee -a "$L"
say done

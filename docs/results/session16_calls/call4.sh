#!/usr/bin/env bash
# Session 16 call 4: session 15's call 8 again (DSAV_SLOT_AT_USE=1 in the device's copy: tree "cur", vs the shipped
# tree "base") under the sm_120 occupancy emulation, now that Timer.graph keeps each captured call's workspace
# alive (call 2's illegal address: the tool freed it); then the DSA parity of the switched-on tree under the
# emulation on every sm_120a config (does the switch itself hold there).
set -o pipefail
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1
R=$PWD; cd kernels || exit 2
export PYTHONPATH=$PWD:$R
L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a "$L"; }
rm -rf /tmp/base && mkdir -p /tmp/base/kernels && cp -r dsa_verify mla_verify /tmp/base/kernels/
sed -i 's/^#define DSAV_SLOT_AT_USE 0$/#define DSAV_SLOT_AT_USE 1/' dsa_verify/csrc/dsa_verify_kernel.cuh
echo "switch on in cur: $(grep -c '^#define DSAV_SLOT_AT_USE 1$' dsa_verify/csrc/dsa_verify_kernel.cuh), off in base: $(grep -c '^#define DSAV_SLOT_AT_USE 0$' /tmp/base/kernels/dsa_verify/csrc/dsa_verify_kernel.cuh)" | tee -a "$L"
python3 -c "from dsa_verify._build import load_experimental as f; f('sm_90a')" >>"$L" 2>&1 &
python3 -c "from verify_tools.dsa_tree_ab import load_tree as f; f('sm_90a', '/tmp/base/kernels/dsa_verify/csrc')" >>"$L" 2>&1 &
wait; say "built"
T=/tmp/base/kernels/dsa_verify/csrc
say "sm_120 emulation: auto (m16 at H=16, m32 at H=64)"
timeout 240 python3 -m verify_tools.dsa_tree_ab --trees base=$T --sm120-occupancy --configs auto \
  --shapes 8:32768:8:16,32:32768:8:16,8:32768:8:64,1:32768:4:16 --kv bf16,fp8 --reps 10 --out $OUT/ab_sm120.json >/dev/null 2>>"$L"
echo "rc=$?" | tee -a "$L"
python3 -c "
import json; d=json.load(open('$OUT/ab_sm120.json'))
for r in d['rows']: print(r['B'], r['L'], r['n'], r['H'], r['kv'], r['config'], r['us'], r.get('ratio_over_base'), r.get('bitwise_equal_base'), r.get('errors', ''))
print('failed', d['failed'])" 2>&1 | tee -a "$L"
say "parity of the switched-on tree under the emulation"
timeout 200 python3 -m verify_tools.dsa_parity --json --out $OUT/p_emul_on.json --no-peer --sm120-occupancy --configs all >/dev/null 2>>"$L"
echo "rc=$?" | tee -a "$L"
python3 -c "
import json; d=json.load(open('$OUT/p_emul_on.json')); print(d.get('summary'))
[print('FAIL', r.get('case'), r.get('config'), r.get('error','')[:200]) for r in d['cases'] if not r['ok']]" 2>&1 | tee -a "$L"
say done

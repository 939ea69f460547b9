#!/usr/bin/env bash
# Prepared in session 15 (not run: the device budget was spent): the DSA mma.sync kernels with
# DSAV_SLOT_AT_USE=1 (the next tile's index words kept raw and checked when the tile is issued; set here in
# the device's copy of the checkout: tree "cur") against the same tree with it off (tree "base", copied first),
# in one process (verify_tools.dsa_tree_ab, its first run: read its errors first): m16 / m32 under the sm_120
# occupancy emulation (what an RTX PRO 6000 runs for H >= 16), and m16 / m16w natively; then the DSA parity of
# the switched-on build on the m configs and memcheck. Run from the repository root with $OUT set (no carry).
# If it is faster where splits hold several tiles and no slower elsewhere, make the switch the code.
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
python3 -c "from dsa_verify._build import load as f; f('sm_90a')" >>"$L" 2>&1 &
wait; say "built"
T=/tmp/base/kernels/dsa_verify/csrc
pr() { python3 -c "
import json; d=json.load(open('$1'))
for r in d['rows']: print(r['B'], r['L'], r['n'], r['H'], r['kv'], r['config'], r['us'], r.get('ratio_over_base'), r.get('bitwise_equal_base'), r.get('errors', ''))
print('failed', d['failed'])" 2>&1 | tee -a "$L"; }
say "sm_120 emulation: m16 (H=16), m32 (H=64)"
timeout 200 python3 -m verify_tools.dsa_tree_ab --trees base=$T --sm120-occupancy --configs auto \
  --shapes 8:32768:8:16,32:32768:8:16,8:32768:8:64,1:32768:4:16 --kv bf16,fp8 --reps 10 --out $OUT/ab_sm120.json >/dev/null 2>>"$L"
echo "rc=$?" | tee -a "$L"; pr $OUT/ab_sm120.json
say "native sm_90a: m16, m16w"
timeout 150 python3 -m verify_tools.dsa_tree_ab --trees base=$T --configs m16,m16w \
  --shapes 8:32768:8:16,1:32768:4:16,1:32768:4:8 --kv bf16,fp8 --reps 10 --out $OUT/ab_sm90.json >/dev/null 2>>"$L"
echo "rc=$?" | tee -a "$L"; pr $OUT/ab_sm90.json
say "parity (switched-on build), m configs"
timeout 200 python3 -m verify_tools.dsa_parity --json --out $OUT/parity.json --no-peer --configs m16,m32,m64,m16d,m16w >/dev/null 2>>"$L"
echo "parity rc=$?" | tee -a "$L"
python3 -c "
import json; d=json.load(open('$OUT/parity.json')); print(d.get('summary')); [print('FAIL', r.get('case'), r.get('config')) for r in d['cases'] if not r['ok']]" 2>&1 | tee -a "$L"
timeout 120 compute-sanitizer --tool memcheck --print-limit 4 --log-file /tmp/san.log python3 -m verify_tools.dsa_parity --cases hostile_b2_n4_h16_fp8,hostile_b2_n4_h64_bf16 --configs m16,m32 --no-graph --no-peer --json > /tmp/san.json 2>/dev/null
echo "memcheck rc=$? | $(grep -v '^=========     ' /tmp/san.log | head -3 | tr '\n' ' ' | cut -c1-300)" | tee -a "$L"
say done

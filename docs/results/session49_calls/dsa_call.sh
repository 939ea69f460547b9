#!/usr/bin/env bash
# Session 49, DSA call (~200 s, no carry): f16 partials in the workspace (csrc -DDSAV_PARTIAL_F16, experimental) against
# the shipped fp32 partials, and the per-CTA timeline of the headline shape on this card.
# base = the checkout (its default build: fp32 partials, .text byte-identical to 6712fb3's, sm_90a and sm_120a);
# f16 = the checkout with DSAV_PARTIAL_F16 defined.
# 1. JIT builds of base and f16 in parallel (then their DSAV_TRACE builds, behind the bench);
# 2. bench of the three H=8 split shapes (bf16 + fp8), processes alternating base, f16, base, f16 (no peers);
# 3. quick parity of f16 (every config, graph replays, no peer);
# 4. the timeline (dsa_bench --trace) of base and f16; then the breakdown (--diag) of base.
# Prediction: f16 / base 0.95-0.98 at B=1 (the store and combine phases ~0.3-0.5 µs shorter), ~0.99 at B=8.
set -o pipefail
. tests/device/call_budget.sh 230  # R, L, left, say, lim
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee -a "$L"
rm -rf /tmp/dsabase && mkdir -p /tmp/dsabase && cp -r kernels /tmp/dsabase/
rm -rf /tmp/dsaf16 && mkdir -p /tmp/dsaf16 && cp -r kernels /tmp/dsaf16/
H=/tmp/dsaf16/kernels/dsa_verify/csrc/dsa_verify_params.h
{ echo "#define DSAV_PARTIAL_F16 1"; cat kernels/dsa_verify/csrc/dsa_verify_params.h; } > "$H"
build() { PYTHONPATH=/tmp/dsa$1/kernels:$R python3 -c "from dsa_verify._build import $2; $2('sm_90a')" >>"$L" 2>&1; }
build base load_jit & build f16 load_jit & wait
say built
build base load_trace & build f16 load_trace &  # the timeline's builds, behind the bench
inn() { local t=$1; shift; (cd /tmp/dsa$t/kernels && PYTHONPATH=/tmp/dsa$t/kernels:$R "$@"); }
SH=1:32768:4:8,1:32768:8:8,8:32768:8:8
for i in 1 2; do
  for t in base f16; do
    inn $t timeout "$(lim 40)" python3 -m verify_tools.dsa_bench --shapes $SH --no-sglang --no-flashmla --reps 30 \
      --out "$OUT/bench_${t}_$i.json" >/dev/null 2>>"$OUT/err.txt"
    echo "bench $t $i rc=$?" | tee -a "$L"
  done
done
python3 - "$OUT" <<'PY' 2>&1 | tee -a "$L"
import json, sys, statistics as st
o = sys.argv[1]
def rows(t, i):
    try:
        d = json.load(open(f"{o}/bench_{t}_{i}.json"))
    except Exception as e:
        return {}
    return {(r["B"], r["L"], r["n"], r["H"], r["kv"]): r for r in d["rows"]}
R = {(t, i): rows(t, i) for t in ("base", "f16") for i in (1, 2)}
for k in R[("base", 1)]:
    b = [R[("base", i)].get(k, {}).get("ours_s") for i in (1, 2)]
    f = [R[("f16", i)].get(k, {}).get("ours_s") for i in (1, 2)]
    b = [x for x in b if x]; f = [x for x in f if x]
    if b and f:
        print("ab", k, R[("base", 1)][k].get("config"), R[("base", 1)][k].get("splits"), "base", [round(x * 1e6, 2) for x in b], "f16",
              [round(x * 1e6, 2) for x in f], "f16/base", round(st.mean(f) / st.mean(b), 4))
PY
say bench
inn f16 timeout "$(lim 60)" python3 -m verify_tools.dsa_parity --json --quick --no-peer --out "$OUT/parity_f16.json" \
  >/dev/null 2>>"$OUT/err.txt"
echo "parity f16 rc=$?" | tee -a "$L"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('parity f16', d.get('summary')); [print('FAIL', r['case'], r.get('config'), r.get('error','')[:100], r.get('rel_fro'), r.get('mismatches')) for r in d['cases'] if not r['ok']]" \
  "$OUT/parity_f16.json" 2>&1 | tee -a "$L"
say parity
wait
for t in base f16; do
  inn $t timeout "$(lim 40)" python3 -m verify_tools.dsa_bench --trace --reps 20 > "$OUT/trace_$t.json" 2>>"$OUT/err.txt"
  echo "trace $t rc=$?" | tee -a "$L"
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); [print(sys.argv[2], k, {a: (round(b, 2) if isinstance(b, float) else b) for a, b in v.items()}) for k, v in d.items()]" \
    "$OUT/trace_$t.json" $t 2>&1 | tee -a "$L"
done
say trace
inn base timeout "$(lim 45)" python3 -m verify_tools.dsa_bench --diag --reps 20 > "$OUT/diag_base.json" 2>>"$OUT/err.txt"
echo "diag base rc=$?" | tee -a "$L"
say done

# Sourced after call_budget.sh by one-off device call scripts (docs/results/session*_calls/): A/B steps of the sparse
# (DSA) kernel across source trees. A tree T is /tmp/dsaT/kernels, a copy of the checkout's kernels/ folder; every
# step runs in its own process with PYTHONPATH on that copy (the JIT cache keys on the sources, so trees never mix).
# Run from the repo root; uses R, L, OUT, lim and say (call_budget.sh).
#   dsa_tree T [N=V..]   /tmp/dsaT = the checkout's kernels/, each macro N defined as V ahead of dsa_verify_params.h
#   dsa_build T..        the JIT build of each tree, in parallel; waits. T:exp is tree T's experimental build
#                        (tiles.EXPERIMENTAL_CONFIGS, e.g. n8x), which a step naming such a config would build first
#   dsa_build_trace T..  the DSAV_TRACE build of each tree, in the background (dsa_trace waits for it)
#   dsa_bench_ab N SHAPES ROUNDS T..  dsa_bench --shapes SHAPES (no peers) of each tree in turn, ROUNDS times
#                        -> $OUT/bench_T_i.json; N = each run's timeout in s (or what is left); then the per-shape
#                        ratios to the first tree (tests/device/dsa_ab.py) to the log
#   dsa_bench_alt T N SHAPES CFG S [ARGS..]  dsa_bench --shapes SHAPES on tree T with --alt-config CFG --alt-splits S
#                        and ARGS (e.g. --sm120-occupancy; no peers; ours and the alternative in one process)
#                        -> $OUT/bench_T_CFG_S[_ARGS].json, the pairs to the log
#   dsa_parity T N ARGS..  dsa_parity --json ARGS on tree T -> $OUT/parity_T.json, its summary and failures to the log
#   dsa_san T TOOL N CASES CFG  compute-sanitizer TOOL (memcheck, racecheck, synccheck) on dsa_parity --cases
#                        CASES --configs CFG (no graphs, no peer) on tree T -> $OUT/san_T_TOOL.log; its summary lines
#                        to the log
#   dsa_trace T N        dsa_bench --trace (the per-CTA timeline of the headline shape) -> $OUT/trace_T.json, its
#                        medians to the log
dsa_tree() {
  local t=$1 x
  shift
  rm -rf "/tmp/dsa$t" && mkdir -p "/tmp/dsa$t" && cp -r kernels "/tmp/dsa$t/" || return 1
  local h=/tmp/dsa$t/kernels/dsa_verify/csrc/dsa_verify_params.h
  { for x in "$@"; do echo "#define ${x%%=*} ${x#*=}"; done; cat kernels/dsa_verify/csrc/dsa_verify_params.h; } > "$h"
}
dsa_in() {  # dsa_in T CMD..: CMD in tree T's kernels/ folder
  local t=$1
  shift
  (cd "/tmp/dsa$t/kernels" && PYTHONPATH="/tmp/dsa$t/kernels:$R" "$@")
}
_dsa_load() { dsa_in "$1" python3 -c "from dsa_verify._build import $2; $2('sm_90a')" >>"$L" 2>&1; }
dsa_build() {
  local t
  for t in "$@"; do
    case $t in
      *:exp) _dsa_load "${t%:exp}" load_experimental & ;;
      *) _dsa_load "$t" load_jit & ;;
    esac
  done
  wait
}
DSA_TRACE_PIDS=""
dsa_build_trace() {
  local t
  for t in "$@"; do
    _dsa_load "$t" load_trace &
    DSA_TRACE_PIDS="$DSA_TRACE_PIDS $!"
  done
}
dsa_bench_ab() {
  local n=$1 shapes=$2 rounds=$3 i t
  shift 3
  for i in $(seq "$rounds"); do
    for t in "$@"; do
      dsa_in "$t" timeout "$(lim "$n")" python3 -m verify_tools.dsa_bench --shapes "$shapes" --no-sglang --no-flashmla \
        --reps 30 --out "$OUT/bench_${t}_$i.json" >/dev/null 2>>"$OUT/err.txt"
      echo "bench $t $i rc=$?" | tee -a "$L"
    done
  done
  python3 "$R/tests/device/dsa_ab.py" bench "$OUT" "$rounds" "$@" 2>&1 | tee -a "$L"
}
dsa_bench_alt() {
  local t=$1 n=$2 shapes=$3 cfg=$4 sp=$5 f
  shift 5
  f=$OUT/bench_${t}_${cfg}_$sp${*:+_$(echo "$*" | tr -c 'a-z0-9\n' '_' | sed 's/^_*//')}.json
  dsa_in "$t" timeout "$(lim "$n")" python3 -m verify_tools.dsa_bench --shapes "$shapes" --no-sglang --no-flashmla \
    --reps 30 --alt-config "$cfg" --alt-splits "$sp" "$@" --out "$f" >/dev/null 2>>"$OUT/err.txt"
  echo "bench $t $cfg S=$sp $* rc=$?" | tee -a "$L"
  python3 "$R/tests/device/dsa_ab.py" alt "$f" 2>&1 | tee -a "$L"
}
dsa_parity() {
  local t=$1 n=$2
  shift 2
  dsa_in "$t" timeout "$(lim "$n")" python3 -m verify_tools.dsa_parity --json "$@" --out "$OUT/parity_$t.json" \
    >/dev/null 2>>"$OUT/err.txt"
  echo "parity $t rc=$?" | tee -a "$L"
  python3 "$R/tests/device/dsa_ab.py" parity "$OUT/parity_$t.json" 2>&1 | tee -a "$L"
}
dsa_san() {
  local t=$1 tool=$2 n=$3 cases=$4 cfg=$5 f=$OUT/san_$1_$2.log
  dsa_in "$t" timeout "$(lim "$n")" compute-sanitizer --tool "$tool" --kernel-name kns=dsa_verify --print-limit 20 \
    python3 -m verify_tools.dsa_parity --json --cases "$cases" --configs "$cfg" --no-graph --no-peer >"$f" 2>&1
  echo "san $t $tool rc=$? (124: timed out)" | tee -a "$L"
  grep -hE "ERROR SUMMARY|RACECHECK SUMMARY|Race reported|\"summary\"" "$f" | head -5 | tee -a "$L"
}
dsa_trace() {
  local t=$1 n=$2 p
  for p in $DSA_TRACE_PIDS; do wait "$p"; done
  dsa_in "$t" timeout "$(lim "$n")" python3 -m verify_tools.dsa_bench --trace --reps 20 > "$OUT/trace_$t.json" \
    2>>"$OUT/err.txt"
  echo "trace $t rc=$?" | tee -a "$L"
  python3 "$R/tests/device/dsa_ab.py" trace "$OUT/trace_$t.json" 2>&1 | tee -a "$L"
}

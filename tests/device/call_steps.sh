# Sourced after call_budget.sh by one-off device call scripts (docs/results/session*_calls/): the dense kernel's
# A/B steps they share. Run from the repo root; uses R, L, OUT, lim and say (call_budget.sh).
#   verdict LABEL F  "LABEL ok summary" of the parity / bench JSON document F, to the log
#   nolo SRC DST     DST = a copy of the csrc folder SRC with MLAV_DIAG_NOLOAD on (no KV copies from tile 2 on:
#                    the consumers' loop without the gather; timing only, wrong output)
#   defs DIR N=V..   DIR = a copy of the checkout's csrc with each macro N defined as V ahead of mla_verify.cu
#   build_trees T..  builds /tmp/T for each T (bench's load_tree, in the background) and the checkout's csrc; waits
#   use T            the checkout's csrc becomes /tmp/T, built (run from kernels/; returns there)
#   check NAME       full parity suite on the checkout's build -> $OUT/parity_NAME.json; returns 0 when it passed
#   san TOOL NAME    compute-sanitizer TOOL on parity case b8_shared_prefix_tree_h16 (skipped under 30 s left)
#   san_case TOOL CASE  compute-sanitizer TOOL on parity case CASE, config sm90wg -> $OUT/san_TOOL.log (run from
#                    kernels/; skipped under 25 s left)
#   bench_rows N     the phase-2 bench of the checkout's build, no peers -> $OUT/bench.json, each row's line to the
#                    log; N = its timeout in s (or what is left; run from kernels/)
#   parity_cases NAME N CASES  the parity tool on CASES (a comma list; $FP8_CASES: every fp8 case), config sm90wg
#                    -> $OUT/parity_NAME.json, its verdict to the log; N = its timeout in s (run from kernels/)
#   ab NAME N ARGS.. bench --tree-ab ARGS -> $OUT/ab_NAME.json, its per-row lines (no CUPTI ones) to the log; N as
#                    above (run from kernels/)
#   patched NAME PATCH  /tmp/NAME = the checkout's csrc with PATCH applied (the checkout left as it was; run from
#                    the repo root); exits 4 when PATCH does not apply
#   trace NAME N SHAPES ARGS..  tests/device/dense_trace.py SHAPES ARGS on the checkout's build -> $OUT/trace_NAME.json
#                    and .txt, its [trace] lines to the log; N = its timeout in s (or what is left)
MLAV_CSRC=kernels/mla_verify/csrc
MLAV_WS_H=mla_verify_wgmma_ws.cuh
FP8_CASES=fp8_seed_b1_prefix65k_n8_h16_chain,fp8_b4_varlen_tree_h16_u8,fp8_b2_n16_h128_tree_scales
FP8_CASES=$FP8_CASES,fp8_b32_chain_n8_h16_prefix1k,fp8_b8_long_splits_ws_h16,fp8_codes_exact
# verdict LABEL FILE: "LABEL ok summary" of a parity or bench JSON document, to stdout and $L
verdict() {
  python3 -c "import json, sys; d = json.load(open(sys.argv[2])); print(sys.argv[1], d.get('ok'), d.get('summary'))" \
    "$1" "$2" 2>&1 | tee -a "$L"
}
nolo() {
  rm -rf "$2" && cp -r "$1" "$2" && { echo "#define MLAV_DIAG_NOLOAD 1"; cat "$1/$MLAV_WS_H"; } > "$2/$MLAV_WS_H"
}
defs() {
  local d=$1 x
  shift
  rm -rf "$d" && cp -r $MLAV_CSRC "$d" || return 1
  { for x in "$@"; do echo "#define ${x%%=*} ${x#*=}"; done; cat $MLAV_CSRC/mla_verify.cu; } > "$d/mla_verify.cu"
}
build_trees() {
  local t
  for t in "$@"; do
    python3 -c "import sys; from verify_tools.bench import load_tree; load_tree('sm_90a', sys.argv[1])" "/tmp/$t" \
      >>"$L" 2>&1 &
  done
  python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1 || { tail -5 "$L"; exit 3; }
  wait
}
use() {
  cd "$R" && rm -rf $MLAV_CSRC && cp -r "/tmp/$1" $MLAV_CSRC && cd kernels || exit 2
  python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1 || { tail -5 "$L"; exit 3; }
}
check() {
  timeout "$(lim 60)" python3 -m verify_tools.parity --json > "$OUT/parity_$1.json" 2>>"$OUT/parity_$1_err.txt"
  local rc=$?
  echo "parity $1 rc=$rc" | tee -a "$L"
  verdict "parity $1" "$OUT/parity_$1.json"
  return $rc
}
# sanitize TOOL LABEL LOGSTEM LIMIT MIN PARITY_ARGS...: compute-sanitizer TOOL on the parity tool with PARITY_ARGS
# (its log $OUT/LOGSTEM.log), at most LIMIT s, skipped under MIN s left; LABEL names it in $L
sanitize() {
  local tool=$1 label=$2 stem=$3 t
  t=$(lim "$4")
  [ "$t" -lt "$5" ] && { echo "SKIP $label: budget" | tee -a "$L"; return; }
  shift 5
  timeout "$t" compute-sanitizer --tool "$tool" --kernel-name kns=mla_verify --print-limit 20 \
    --log-file "$OUT/$stem.log" python3 -m verify_tools.parity "$@" --json > "$OUT/$stem.out" 2>&1
  echo "$label rc=$?" | tee -a "$L"
  tail -2 "$OUT/$stem.log" | tee -a "$L"
}
san() { sanitize "$1" "$1 $2" "san_$1_$2" 80 30 --cases b8_shared_prefix_tree_h16; }
san_case() { sanitize "$1" "$1 $2" "san_$1" 60 25 --cases "$2" --configs sm90wg; }
bench_rows() {
  timeout "$(lim "$1")" python3 -m verify_tools.bench --json --no-sglang --no-flashmla > "$OUT/bench.json" \
    2>>"$OUT/bench_err.txt"
  echo "bench rc=$?" | tee -a "$L"
  grep '^\[bench\]' "$OUT/bench_err.txt" | tee -a "$L"
  verdict bench "$OUT/bench.json"
}
parity_cases() {
  timeout "$(lim "$2")" python3 -m verify_tools.parity --cases "$3" --configs sm90wg --json > "$OUT/parity_$1.json" \
    2>>"$OUT/parity_err.txt"
  echo "parity $1 rc=$?" | tee -a "$L"
  verdict parity "$OUT/parity_$1.json"
}
ab() {
  local name=$1 t
  t=$(lim "$2")
  shift 2
  timeout "$t" python3 -m verify_tools.bench --tree-ab "$@" --ab-out "$OUT/ab_$name.json" >/dev/null 2>>"$OUT/ab_err.txt"
  echo "ab $name rc=$?" | tee -a "$L"
  python3 -m verify_tools.bench --ab-summary "$OUT/ab_$name.json" 2>&1 | grep -v '^cupti' | tee -a "$L"
}
patched() {
  { git apply "$2" && rm -rf "/tmp/$1" && cp -r $MLAV_CSRC "/tmp/$1" && git apply -R "$2"; } 2>>"$L" ||
    { echo "$2 did not apply" | tee -a "$L"; exit 4; }
}
trace() {
  local name=$1 t
  t=$(lim "$2")
  shift 2
  timeout "$t" python3 "$R/tests/device/dense_trace.py" "$@" --out "$OUT/trace_$name.json" > "$OUT/trace_$name.txt" 2>&1
  echo "trace $name rc=$?" | tee -a "$L"
  grep '^\[trace\]' "$OUT/trace_$name.txt" | tee -a "$L"
}

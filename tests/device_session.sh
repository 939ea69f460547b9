#!/usr/bin/env bash
# One device-tool call on the H200 that runs every GPU-only check outside the kernel's own
# device_run.sh, in one machine start: JIT build of the bundled kernel, the SGLang plugin's
# verify path against SGLang's extend_attention_fwd (tests/integration/device_check.sh), the
# KV defragmenter at 1M slots (kernels/defrag/device_check.sh), the GPU-marked pytest tests,
# and compute-sanitizer racecheck on the 65k parity case. Every stage has its own time limit
# inside one global deadline, so the call ends inside the tool's 600 s limit and whatever ran
# comes back as $OUT/session.tgz (the tool returns at most 8 files).
# Run with carry [".whl", ".whl-plugin"] from the repo root.
set -u -o pipefail
FINAL_OUT=${OUT:-/tmp/session-out}; mkdir -p "$FINAL_OUT"
W=/tmp/session; rm -rf "$W"; mkdir -p "$W"
export OUT=$W PYTHONUNBUFFERED=1 MAX_JOBS=16 ORCHESTRATOR_KERNEL_CACHE=/tmp/mlav-cache
LOG=$W/session.log
START=$(date +%s); DEADLINE=$((START + ${SESSION_BUDGET_S:-560}))
say() { echo "== $* ($(date +%T), $(( $(date +%s) - START )) s)" | tee -a "$LOG"; }
left() { local l=$((DEADLINE - $(date +%s))); [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }
run_stage() {  # run_stage NAME LIMIT_S CMD...
  local name=$1 lim; lim=$(left "$2"); shift 2
  if [ "$lim" -lt 10 ]; then say "SKIP $name: global deadline reached"; return; fi
  say "$name (limit ${lim}s)"
  timeout "$lim" "$@" > "$W/$name.out" 2>&1; local rc=$?
  say "$name rc=$rc"; tail -25 "$W/$name.out" | tee -a "$LOG" >/dev/null
}
say "host $(nvidia-smi -L 2>&1 | head -1); commit $(git rev-parse --short HEAD 2>/dev/null)"
SITE=/tmp/site
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl >>"$LOG" 2>&1
python3 -m zipfile -e .whl/sglang-0.5.23-pyonly.zip "$SITE" >>"$LOG" 2>&1
export PYTHONPATH=$SITE:$PWD
run_stage jit_build 150 python3 -c "import time;t=time.time();from kernels.mla_verify._build import load;load('sm_90a');print('jit build s',round(time.time()-t,1))"
run_stage plugin 150 bash tests/integration/device_check.sh quick
run_stage defrag 250 bash kernels/defrag/device_check.sh
run_stage pytest_gpu 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels
run_stage racecheck_65k 90 compute-sanitizer --tool racecheck --kernel-name kns=mla_verify --print-limit 20 \
  python3 -m kernels.parity --cases seed_b1_prefix65k_n8_h16_chain --json
say "done"
tar czf "$FINAL_OUT/session.tgz" -C "$W" . && cp "$LOG" "$FINAL_OUT/session.log"
grep -hE "rc=|summary|ok |passed|failed|SUMMARY|hazard" "$LOG" "$W"/*.out 2>/dev/null | tail -40

#!/usr/bin/env bash
# One device-tool call on the H200 that runs every GPU-only check outside the kernel's own
# device_run.sh, in one machine start: JIT build of the bundled kernel, the SGLang plugin's
# verify path against SGLang's extend_attention_fwd (tests/device/plugin_check.sh), the
# live KV-defrag hook on real SGLang structures (sglang_verify_plugin.defrag_gpu_check), the
# GPU-marked pytest tests, and the orchestrator itself running phases 0-2 on this host
# (connection: local, arch sm_90a) with SGLang importable so phase 2 compares against it.
# Every stage has its own time limit inside one global deadline, so the call ends inside the
# tool's 600 s limit and whatever ran comes back as $OUT/session.tgz (the tool returns at most 8
# files). Run from the repo root with carry [".whl", ".whl-plugin", ".whl-orch"]:
#   .whl / .whl-plugin  SGLang 0.5.23 and what its backend imports (see device_check.sh)
#   .whl-orch           the orchestrator's own dependencies (typer, rich, fabric, paramiko, ...)
#                       (re-create: pip download --only-binary :all: --python-version 3.12 --platform
#                       manylinux2014_x86_64 -d .whl-orch typer rich fabric==3.2.3 paramiko==5.1.0 filelock pyyaml)
# Optional: SESSION_STAGES="jit prebuilt defrag_hook plugin orchestrator pytest_gpu" (default: all but
# prebuilt, in that order). prebuilt = plugin_check.sh prebuilt (AOT library, first-call timings).
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
for d in .whl .whl-plugin .whl-orch; do
  ls "$d"/*.whl >/dev/null 2>&1 && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --upgrade --target "$SITE" "$d"/*.whl >>"$LOG" 2>&1
done
python3 -m zipfile -e .whl/sglang-0.5.23-pyonly.zip "$SITE" >>"$LOG" 2>&1
export PYTHONPATH=$SITE:$PWD/kernels:$PWD
STAGES=${SESSION_STAGES:-"jit defrag_hook plugin orchestrator pytest_gpu"}
want() { case " $STAGES " in *" $1 "*) return 0;; esac; return 1; }
want prebuilt && run_stage prebuilt 240 bash tests/device/plugin_check.sh prebuilt
want jit && run_stage jit_build 150 python3 -c "import time;t=time.time();from mla_verify._build import load;load('sm_90a');print('jit build s',round(time.time()-t,1))"
want defrag_hook && run_stage defrag_hook 150 python3 tests/integration/with_sgl_kernel_shim.py sglang_verify_plugin.defrag_gpu_check --json
want plugin && run_stage plugin 120 bash tests/device/plugin_check.sh quick
if want orchestrator; then
  printf 'hosts:\n  - name: h200\n    connection: local\n    arch: sm_90a\n    remote_root: %s\n' "$W/orch-root" > "$W/inventory.yaml"
  run_stage orchestrator_run 300 python3 -m orchestrator run 0 1 2 --inventory "$W/inventory.yaml" --state-dir "$W/orch-state" --json
  run_stage orchestrator_status 30 python3 -m orchestrator status --state-dir "$W/orch-state"
fi
want pytest_gpu && run_stage pytest_gpu 90 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels
say "done"
tar czf "$FINAL_OUT/session.tgz" -C "$W" . && cp "$LOG" "$FINAL_OUT/session.log"
grep -hE "rc=|summary|ok |passed|failed|SUMMARY|tokens_moved|min_sol|completed|blocked" "$LOG" "$W"/*.out 2>/dev/null | cut -c1-300 | tail -50

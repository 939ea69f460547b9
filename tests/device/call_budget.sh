# Sourced by one-off device call scripts (docs/results/session*_calls/): the call's deadline and its log.
# Sets R (repo root), L ($OUT/log.txt), DEADLINE (start + ${CALL_BUDGET_S:-$1} s), the kernel cache and PYTHONPATH;
# defines left (seconds to the deadline), say MSG (a timestamped line to stdout and $L) and lim N (N or what is left,
# the smaller: a step's timeout). Usage: . tests/device/call_budget.sh 330
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1
R=$PWD; L=$OUT/log.txt; DEADLINE=$(($(date +%s) + ${CALL_BUDGET_S:-${1:-300}}))
export PYTHONPATH=$R/kernels:$R
left() { echo $((DEADLINE - $(date +%s))); }
say() { echo "== $* ($(date +%T), ${SECONDS}s, left $(left)s)" | tee -a "$L"; }
lim() { local l; l=$(left); [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }

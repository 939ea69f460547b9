#!/usr/bin/env bash
# Session 42, call 2 (no carry, nvidia-h100-x1): the checkout's csrc is E4f shipped (session 38's E4, fixed form,
# alone: e4f.patch = this session's csrc change); /tmp/base is the csrc before it (e4f.patch reversed).
# 1. parity on the shipped build; racecheck and synccheck on it (call 1 ran them on e5, which holds E4f's S side).
# 2. A/B base / cur, 5 interleaved reps, on the batched rows and B=1 4k / 32k, with the graph-buffer rows of cur.
# 3. The phase-2 bench rows of the shipped kernel (no peers).
set -o pipefail
. tests/device/call_budget.sh 330  # R, L, left, say, lim
. tests/device/call_steps.sh       # nolo, build_trees, use, check, san
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader | tee -a "$L"
C=$MLAV_CSRC
P=docs/results/session42_calls/e4f.patch
git apply -R "$P" 2>>"$L" && rm -rf /tmp/base && cp -r $C /tmp/base && git apply "$P" 2>>"$L" \
  || { echo "e4f.patch did not reverse" | tee -a "$L"; exit 4; }
grep -q "issue_pv_steps<2, 2>" $C/$MLAV_WS_H && ! grep -q "issue_pv_steps<2, 2>" /tmp/base/$MLAV_WS_H \
  || { echo "trees wrong" | tee -a "$L"; exit 4; }
build_trees base
say built
cd kernels || exit 2
check shipped
say "parity"
san racecheck shipped; san synccheck shipped
say "sanitizers"
timeout "$(lim 100)" python3 -m verify_tools.bench --tree-ab base=/tmp/base --ab-kv bf16 --ab-reps 5 \
  --ab-gb-trees cur --shapes 8:32768:8:16,32:8192:8:16,4:65536:4:64,2:16384:8:128,16:32768:4:16,1:4096:8:16,1:32768:8:16 \
  --ab-out "$OUT/ab.json" >/dev/null 2>>"$OUT/ab_err.txt"
echo "ab rc=$?" | tee -a "$L"
python3 -m verify_tools.bench --ab-summary "$OUT/ab.json" 2>&1 | tee -a "$L"
say "ab done"
timeout "$(lim 120)" python3 -m verify_tools.bench --json --no-sglang --no-flashmla > "$OUT/bench.json" \
  2>>"$OUT/bench_err.txt"
echo "bench rc=$?" | tee -a "$L"
grep '^\[bench\]' "$OUT/bench_err.txt" | tee -a "$L"
python3 -c "import json;d=json.load(open('$OUT/bench.json'));print('bench', d.get('ok'), d.get('summary'))" 2>&1 \
  | tee -a "$L"
say done

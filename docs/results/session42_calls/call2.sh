#!/usr/bin/env bash
# Session 42, call 2 (no carry, nvidia-h100-x1): the checkout's csrc is E4f shipped (session 38's E4, fixed form,
# alone: e4f.patch = this session's csrc change); /tmp/base is the csrc before it (e4f.patch reversed). Ran as
# call 2 (H100, 340 s); main's csrc has since changed in comments only, so e4f.patch no longer reverses on it.
# E6 (e6.patch on the shipped csrc; e6b = E6 with MLAV_E6_ARRIVE_FIRST=1): the S warpgroup's PV(j) takes P from
# registers (wgmma RS), each half issued before its P stores for the V warpgroup (e6b: the second half after them).
# 1. parity on the shipped build; 2. A/B base / e6 / e6b / cur, 5 interleaved reps, batched rows and B=1 4k / 32k,
# graph-buffer rows of cur; 3. racecheck and synccheck on the shipped build; 4. parity on e6, its sanitizers if it
# passed; 5. the phase-2 bench rows of the shipped kernel (no peers).
# Keep rule for E6 (as session 38's): every loaded ASYM row (all batched rows but (16, 32768, 4, 16), which is bound
# by memory) <= 0.99 of cur, no row over cur beyond the run's spread, bitwise on every row, parity passing and
# deterministic, sanitizers clean.
set -o pipefail
. tests/device/call_budget.sh 480  # R, L, left, say, lim
. tests/device/call_steps.sh       # nolo, build_trees, use, check, san
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader | tee -a "$L"
C=$MLAV_CSRC; H=$MLAV_WS_H; D=docs/results/session42_calls
{ git apply -R $D/e4f.patch && rm -rf /tmp/base && cp -r $C /tmp/base && git apply $D/e4f.patch \
  && git apply $D/e6.patch && rm -rf /tmp/e6 /tmp/e6b && cp -r $C /tmp/e6 && cp -r $C /tmp/e6b \
  && git apply -R $D/e6.patch; } 2>>"$L" || { echo "patches did not apply" | tee -a "$L"; exit 4; }
sed -i 's|^#define MLAV_E6_ARRIVE_FIRST 0|#define MLAV_E6_ARRIVE_FIRST 1|' /tmp/e6b/$H
grep -q "issue_pv_steps<2, 2>" $C/$H && ! grep -q "issue_pv_steps<2, 2>" /tmp/base/$H && ! grep -q MLAV_E6 $C/$H \
  && grep -q "define MLAV_E6_ARRIVE_FIRST 1" /tmp/e6b/$H || { echo "trees wrong" | tee -a "$L"; exit 4; }
build_trees base e6 e6b
say built
cd kernels || exit 2
check shipped
say "parity"
timeout "$(lim 120)" python3 -m verify_tools.bench --tree-ab base=/tmp/base,e6=/tmp/e6,e6b=/tmp/e6b --ab-kv bf16 \
  --ab-reps 5 --ab-gb-trees cur \
  --shapes 8:32768:8:16,32:8192:8:16,4:65536:4:64,2:16384:8:128,16:32768:4:16,1:4096:8:16,1:32768:8:16 \
  --ab-out "$OUT/ab.json" >/dev/null 2>>"$OUT/ab_err.txt"
echo "ab rc=$?" | tee -a "$L"
python3 -m verify_tools.bench --ab-summary "$OUT/ab.json" 2>&1 | tee -a "$L"
say "ab done"
san racecheck shipped; san synccheck shipped
say "sanitizers"
use e6
check e6 && { san racecheck e6; san synccheck e6; }
say "e6"
use e6b
check e6b
say "e6b"
cd "$R" && rm -rf $C && cp -r /tmp/base $C && git apply $D/e4f.patch && cd kernels || exit 2
python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1 || { tail -5 "$L"; exit 3; }
timeout "$(lim 120)" python3 -m verify_tools.bench --json --no-sglang --no-flashmla > "$OUT/bench.json" \
  2>>"$OUT/bench_err.txt"
echo "bench rc=$?" | tee -a "$L"
grep '^\[bench\]' "$OUT/bench_err.txt" | tee -a "$L"
python3 -c "import json;d=json.load(open('$OUT/bench.json'));print('bench', d.get('ok'), d.get('summary'))" 2>&1 \
  | tee -a "$L"
say done

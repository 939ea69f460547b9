#!/usr/bin/env bash
# Session 9's last diagnostic call (one device call, three parts; writes under $OUT):
#  1. Nsight Compute stall profile of the dense split kernels at B=8 L=32k n=8 H=16: sm90wg, the seesaw
#     sm90ss of this tree (BN=32, 4 stages) and of .ssvar/bn64 (BN=64, 2 stages: git archive 67acd8f),
#     each with and without KV traffic (.ssvar/*noload: MLAV_DIAG_NOLOAD=1).
#  2. The dense bench's graph-buffer rows with the exact_grid side (session 8's queued command).
#  3. DSA n8rw at S=19 under the sm_120 occupancy emulation against sm_120a's auto (session 8's queued command).
set -o pipefail
OUT=${OUT:-/tmp/s9}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 MAX_JOBS=16 ORCHESTRATOR_KERNEL_CACHE=/tmp/mlav-cache
export PYTHONPATH=$PWD/kernels${PYTHONPATH:+:$PYTHONPATH}
say() { echo "== $* (t=${SECONDS}s)" | tee -a "$OUT/log.txt"; }
say "JIT builds"
for d in ../.ssvar/bn64 ../.ssvar/bn64noload ../.ssvar/noload; do
  (cd kernels && python3 -c "from verify_tools.bench import load_tree; load_tree('sm_90a', '$d')") >> "$OUT/log.txt" 2>&1 &
done
python3 -c "from mla_verify._build import load; load('sm_90a')" >> "$OUT/log.txt" 2>&1; wait
for spec in sm90wg: sm90ss: sm90ss:../.ssvar/bn64 sm90wg:../.ssvar/noload sm90ss:../.ssvar/noload sm90ss:../.ssvar/bn64noload; do
  cfg=${spec%%:*}; tree=${spec#*:}; tag=${cfg}_$(basename "${tree:-cur}")
  say "ncu $tag"
  (cd kernels && timeout 100 ncu --clock-control none -k regex:split --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \
    --section MemoryWorkloadAnalysis python3 ../tests/device/dense_ncu.py 8:32768:8:16 "$cfg" $tree) > /tmp/ncu_one.txt 2>&1
  { echo "######## $tag"; cat /tmp/ncu_one.txt; } >> "$OUT/ncu_all.txt"
  grep -E " Duration|Compute \(SM\) Thro|DRAM Throughput|Issue Slots Busy|No Eligible|Eligible Warps|Warp Cycles Per Issued|L2 Hit" /tmp/ncu_one.txt | sed "s/^/  /" | head -10 | tee -a "$OUT/log.txt"
done
say "dense graph-buffer rows with exact_grid"
(cd kernels && timeout 150 python3 -m verify_tools.bench --json --no-sglang --no-flashmla --graph-buffer --shapes 1:4096:8:16) > "$OUT/bench_gb.json" 2> >(grep "^\[bench\]" | tee -a "$OUT/log.txt" >&2)
say "DSA n8rw S=19, sm_120 occupancy"
mkdir -p /tmp/dsa
DSA_MODE=ab ALT_CONFIG=n8rw BENCH_ARGS="--sm120-occupancy --alt-splits 19" BENCH_SHAPES=1:32768:4:8 OUT=/tmp/dsa \
  timeout 240 bash tests/device/dsa_run.sh 60 --cases glm5_b1_n4_h8_L32k_fp8 --configs n8rw 2>&1 | tail -14 | tee -a "$OUT/log.txt"
cp /tmp/dsa/dsa_bench_n8rw.json /tmp/dsa/dsa_parity.json "$OUT/" 2>/dev/null
say "done"

#!/usr/bin/env bash
# Session 33, call 4 (carry .whl .whl-dsa .whl-flashmla, rebuilt by tests/device/make_wheels.sh, .whl-dsa = .whl-pydantic's
# wheels; <= 560 s).
# 1. Dense: the bench's new draft-tree rows (TREE_SHAPES: a random topk > 1 tree timed in alternation with the chain of
#    the same shape; issue 13 asks trees within 5% of chains), no peers, no graph-buffer mode.
# 2. Sparse (DSA) against its incumbents on an H100 for the first time (every earlier DSA bench with SGLang's Triton
#    kernel ran on an H200): build check, quick parity, the H=8 shapes (bf16 and fp8) beside SGLang 0.5.23's DSA Triton
#    kernel, memcheck of the hostile cases, FlashMLA's sparse kernels.
R=$PWD
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
( cd kernels && PYTHONPATH=$R/kernels:$R timeout 150 python3 -m verify_tools.bench --json --no-sglang --no-flashmla \
    --shapes 1:4096:8:16,1:32768:8:16,8:32768:8:16,32:8192:8:16 > "$OUT/dense_tree_bench.json" 2> /tmp/dense_tree.err
  echo "dense tree bench rc=$?"; grep "tree B=" /tmp/dense_tree.err
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('summary', {k: d['summary'][k] for k in ('max_tree_over_chain','min_sol_pct','max_rel_err_vs_oracle')}); [print(r['B'], r['L'], r['n'], r['H'], round(r['new_us'],2), 'tree', round(r.get('tree_us',0),2), 'chain', round(r.get('tree_chain_us',0),2), 'ratio', round(r.get('tree_over_chain',0),4)) for r in d['rows']]" "$OUT/dense_tree_bench.json" )
DSA_MODE=final PARITY_TIMEOUT=80 BENCH_TIMEOUT=170 MEMCHECK_TIMEOUT=60 FM_TIMEOUT=80 FINAL_DIAG=0 \
  BENCH_SHAPES=1:32768:4:8,1:32768:8:8,8:32768:8:8,32:32768:8:8,1:4096:4:8,1:131072:4:8 \
  timeout 420 bash tests/device/dsa_run.sh 150 --quick

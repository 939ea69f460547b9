#!/usr/bin/env bash
# Session 33, call 5 (carry .whl .whl-plugin .whl-pydantic, rebuilt by tests/device/make_wheels.sh; <= 450 s): the shipped
# dense kernel (7e53b30's) through SGLang 0.5.23's own TritonAttnBackend CUDA-graph path for target verify
# (tests/integration/plugin_graph_path_check.py via plugin_check.sh graph: phase 0's prebuilt library, the plugin's
# registry backend, init_cuda_graph_state, capture per batch size, replays after in-place rewrites), token-exact vs
# SGLang's extend_attention_fwd and timed vs the exact-length call. Last run on 2026-12-01 (kernel 183252d); the kernel
# has changed since in every part (warp-specialized producer, staged bf16 epilogue, ASYM consumers, combine, device rule).
GRAPH_TIMEOUT_S=240 bash tests/device/plugin_check.sh graph

#!/usr/bin/env bash
# Session 33, call 6 (carry .whl .whl-plugin .whl-pydantic; ~2 min): the plugin's verify path on SGLang-built metadata
# (tests/integration/plugin_gpu_check.py via plugin_check.sh full: every parity case SGLang can issue, bf16 and its
# fp8_e4m3 pool, against SGLang's own extend_attention_fwd and the oracle) on the kernel shipped now. Last run: session
# 19 call 2 (--quick, 4 cases), on an older kernel.
bash tests/device/plugin_check.sh full

#!/usr/bin/env bash
# Re-create the git-ignored wheel folders that device runs carry (run here, from the repo root,
# with network access to the package registry; the device machine has none):
#   .whl/         sglang 0.5.23's Python tree as sglang-0.5.23-pyonly.zip (installed with --no-deps,
#                 no compiled parts) + the small pure-Python / cp312 deps its attention kernels import
#                 that the device image lacks
#   .whl-plugin/  what TritonAttnBackend and SGLang's MLA test kit import beyond that
#   .whl-orch/    the orchestrator's own dependencies (tests/device/session.sh runs it on the H200)
#   .whl-pydantic/ pydantic 2 and its compiled core (SGLang's kernel modules and the plugin graph check
#                 import it; the device image has none)
#   .whl-flashmla/ sgl-flash-mla 1.0.0 (SGLang 0.5.23's pin; package `flash_mla`, abi3 + PyTorch stable
#                 ABI, CUDA 13; 9.9 MB): the FlashMLA peer of both benches (tests/device/flashmla_peer.sh)
# The device's python is 3.12 (torch, triton, transformers, numpy come with its image).
set -euo pipefail
cd "$(dirname "$0")/../.."
PLAT=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
      --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform manylinux_2_24_x86_64
      --platform manylinux_2_31_x86_64 --platform manylinux_2_34_x86_64 --platform manylinux_2_35_x86_64)
dl() { local dir=$1; shift; python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
         --implementation cp "${PLAT[@]}" -d "$dir" "$@"; }
mkdir -p .whl .whl-plugin .whl-orch .whl-pydantic .whl-flashmla
if [ ! -f .whl/sglang-0.5.23-pyonly.zip ]; then
  tmp=$(mktemp -d); python3 -m pip download -q --no-deps -d "$tmp" sglang==0.5.23
  (cd "$tmp" && python3 -m zipfile -e sglang-0.5.23-*.whl x && cd x && python3 -m zipfile -c ../sglang-0.5.23-pyonly.zip sglang sglang-0.5.23.dist-info)
  mv "$tmp/sglang-0.5.23-pyonly.zip" .whl/; rm -rf "$tmp"
fi
dl .whl orjson==3.13.0 pybase64==1.5.1 msgspec==0.23.0 pyzmq==27.3.0 partial-json-parser==0.2.1.1.post7 \
  dill==0.4.1 loguru==0.7.3 ipython==9.18.1 traitlets==5.16.1 starlette==1.10.0 sniffio==1.3.1
dl .whl-plugin apache-tvm-ffi==0.1.15.post2 compressed-tensors==0.20.1 gguf==0.19.0 openai==3.57.0 \
  uvicorn==0.54.0 fastapi==0.165.0 opentelemetry-api==1.45.2 httpx2==2.16.2 httpcore2==2.16.2 truststore==0.10.5
dl .whl-orch typer rich fabric==3.2.3 paramiko==5.1.0 invoke decorator deprecated filelock pyyaml pydantic \
  pydantic-core annotated-types typing-inspection bcrypt pynacl cryptography cffi pycparser
dl .whl-pydantic pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 \
  typing-extensions==4.16.0
python3 -m pip download -q --no-deps -d .whl-flashmla sgl-flash-mla==1.0.0  # one abi3 wheel: no --python-version
du -sh .whl .whl-plugin .whl-orch .whl-pydantic .whl-flashmla

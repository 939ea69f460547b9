"""KV-cache defragmenter for SGLang's MLA pool (phase 4).

Modules: ``pool`` (model of the pool's index structures), ``planner`` (pure relocation
planner), ``executor`` (batched relocation on CPU/CUDA tensors), ``workload`` (allocation
churn), ``validate`` and ``bench`` (used by ``python -m kv_defrag``). Importing the
package imports neither torch nor numpy; ``executor``, ``validate`` and ``bench`` import torch
inside their functions.
"""

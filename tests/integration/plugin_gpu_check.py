"""GPU check: the plugin's verify path vs SGLang's own extend_attention_fwd, token-exact.

Run on a CUDA machine with sglang 0.5.23 importable (tests/device/plugin_check.sh sets
that up on the H200)::

    python tests/integration/plugin_gpu_check.py --json [--quick] [--out FILE]

For each parity case with one draft count for every request (SGLang's verify batches are
uniform), a TARGET_VERIFY batch is built the way SGLang does (sglang_verify_batch.py: the
registry's factory, SGLang's MLA mock runner, SGLang's init_forward_metadata), then
``forward_extend`` runs twice on the same inputs: through the plugin (the bundled kernel via
the 0.5.23 verify hook; the call must really reach the kernel) and through SGLang's stock
Triton ``extend_attention_fwd``. Token exactness: argmax of ``o @ W`` for the parity suite's
fixed LM head, per (token, head) row; rows whose SGLang-output top-2 margin is a near tie are
excluded and counted (verify_tools.parity.token_check). Both outputs are also compared with the
float64 oracle, and a CUDA-graph capture + replay of the plugin path must reproduce the eager
output bit for bit. fp8 cases run on SGLang's fp8_e4m3 MLA pool (--kv-cache-dtype fp8_e4m3, no checkpoint kv
scales: descales 1.0); SGLang's own fp8 kernel casts q and P to fp8, so there the plugin must be token-exact against
the oracle and its agreement with SGLang is reported. Exit 0 all pass, 1 a check failed, 75 blocked (no CUDA / no
sglang).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
for p in (str(REPO / "kernels"), str(HERE)):
    if p not in sys.path:
        sys.path.insert(0, p)

EXIT_BLOCKED = 75
GRAPH_CASES = 3  # the first few runnable cases are also captured in a CUDA graph


def _blocked(reason: str) -> dict:
    return {
        "ok": False,
        "blocked": reason,
        "cases": [],
        "summary": {"cases_total": 0, "cases_failed": 0, "token_mismatches": None},
    }


def _setup() -> str | None:
    """Import torch/sglang, register the plugin (bundled); the reason it cannot, or None."""
    try:
        import torch
    except ImportError as exc:
        return f"torch not importable: {exc}"
    if not torch.cuda.is_available():
        return "no CUDA device"
    import sgl_kernel_import_shim

    sgl_kernel_import_shim.install()
    try:
        import sglang  # noqa: F401
        from sglang.test.kits.attention_unittest.attention_methods import mla_attention  # noqa: F401
    except Exception as exc:
        return f"sglang not importable: {type(exc).__name__}: {exc}"
    import sglang_verify_plugin as plugin
    from sglang_verify_plugin.config import VerifyConfig

    if not plugin.register(lambda: VerifyConfig("bundled", None, False, "plugin_gpu_check")):
        return "could not register the plugin under 'triton'"
    return None


def _cases(quick: bool):
    from verify_tools.parity import CASES, QUICK

    runnable, skipped = [], []
    for spec in CASES:
        if len(set(spec.draft_lens)) != 1:
            skipped.append({"name": spec.name, "reason": "draft counts differ per request; SGLang verify is uniform"})
        elif spec.tree == "full":
            skipped.append({"name": spec.name, "reason": "non-causal (no custom mask): not a target-verify call"})
        elif quick and spec.name not in QUICK and spec.name != CASES[0].name:
            skipped.append({"name": spec.name, "reason": "--quick"})
        else:
            runnable.append(spec)
    return runnable, skipped


def _visibility(spec):
    """The draft block of the mask: the case's tree (mla_verify.inputs), causal for chains."""
    import torch

    from mla_verify.inputs import tree_parents, tree_visibility

    n = spec.draft_lens[0]
    if spec.tree in ("chain", "causal"):
        return torch.tril(torch.ones(n, n, dtype=torch.bool))
    return tree_visibility(tree_parents(n, spec.tree, torch.Generator().manual_seed(spec.seed)))


def _rel(a, b) -> float:
    import torch

    d = a.to(torch.float64) - b.to(torch.float64)
    return float(d.norm() / b.to(torch.float64).norm().clamp_min(1e-300))


def run_case(spec, w, graph: bool) -> dict:
    import torch
    from sglang_verify_batch import build_verify_batch

    from mla_verify.reference import mla_verify_ref
    from verify_tools.parity import token_check

    t0 = time.time()
    n, H = spec.draft_lens[0], spec.heads
    fp8 = spec.kv_dtype == "fp8"
    vb = build_verify_batch(
        spec.prefix_lens,
        n,
        H,
        device="cuda",
        seed=spec.seed,
        sm_scale=spec.sm_scale,
        visibility=_visibility(spec),
        fp8_kv_cache=fp8,
    )
    be, fb = vb.backend, vb.forward_batch
    T = vb.q.shape[0]
    be.init_forward_metadata(fb)
    if type(be).__name__ != "BundledVerifyTritonBackend" or be.bundled_verify_route != "hook":
        raise AssertionError(f"registry built {type(be).__name__} (route {getattr(be, 'bundled_verify_route', None)})")
    calls0 = be.bundled_verify.bundled_calls
    o_plugin = be.forward_extend(vb.q, vb.k, vb.v, vb.layer, fb).view(T, H, 512).clone()
    torch.cuda.synchronize()
    ran_bundled = be.bundled_verify.bundled_calls == calls0 + 1
    be.use_verify_shared_kv = False  # SGLang's own path on the very same backend and metadata
    o_sglang = be.forward_extend(vb.q, vb.k, vb.v, vb.layer, fb).view(T, H, 512).clone()
    be.use_verify_shared_kv = True
    torch.cuda.synchronize()
    md = be.forward_metadata
    pool = vb.runner.token_to_kv_pool
    ref = mla_verify_ref(
        vb.q.view(T, H, 576),
        vb.k,
        vb.v,
        pool.get_key_buffer(0),
        pool.get_value_buffer(0),
        md.qo_indptr,
        md.kv_indptr,
        md.kv_indices,
        md.custom_mask,
        True,
        md.mask_indptr,
        sm_scale=spec.sm_scale,
    )
    finite = bool(torch.isfinite(o_plugin).all())
    tok = token_check(o_plugin, o_sglang, w)
    row = {
        "name": spec.name,
        "B": spec.batch,
        "n": n,
        "H": H,
        "kv_dtype": "fp8_e4m3" if fp8 else "bfloat16",
        "tree": spec.tree,
        "prefix_lens": list(spec.prefix_lens)
        if spec.batch <= 8
        else f"{min(spec.prefix_lens)}..{max(spec.prefix_lens)}",
        "ran_bundled_kernel": ran_bundled,
        "declined": dict(be.bundled_verify.reasons),
        "finite": finite,
        "rows": tok["rows"],
        "token_mismatches_vs_sglang": tok["token_mismatches"],
        "near_ties_vs_sglang": tok["near_ties"],
        "mismatches_in_near_ties": tok["mismatches_in_near_ties"],
        "token_mismatches_plugin_vs_oracle": token_check(o_plugin, ref, w)["token_mismatches"],
        "token_mismatches_sglang_vs_oracle": token_check(o_sglang, ref, w)["token_mismatches"],
        "rel_err_plugin_vs_sglang": _rel(o_plugin, o_sglang),
        "rel_err_plugin_vs_oracle": _rel(o_plugin, ref),
        "rel_err_sglang_vs_oracle": _rel(o_sglang, ref),
    }
    if graph:
        row["graph_replay_equal"] = _graph_check(vb, o_plugin)
        # What the process record (active.d/<rank>.json) says this capture replays, per batch size.
        row["captured_routing"] = be.bundled_verify.stats()["captured"]
    row["library"] = be.bundled_verify.library
    row["static_decline"] = be.bundled_verify.static_decline
    captured = row.get("captured_routing")
    # A captured case must have recorded its batch size, on the bundled kernel (never vacuous).
    captured_ok = not graph or (bool(captured) and all(c["kernel"] == "bundled" for c in captured.values()))
    # bf16: token-exact against SGLang's kernel; fp8: against the oracle (SGLang's fp8 kernel rounds q and P to fp8)
    exact = row["token_mismatches_plugin_vs_oracle"] if fp8 else tok["token_mismatches"]
    row["ok"] = ran_bundled and finite and exact == 0 and row.get("graph_replay_equal", True) is True and captured_ok
    row["seconds"] = round(time.time() - t0, 2)
    return row


def _graph_check(vb, o_eager) -> bool:
    """Capture the plugin's verify path in a CUDA graph (workspace from init_cuda_graph_state)."""
    import torch

    be, fb = vb.backend, vb.forward_batch
    bs, n, H = len(vb.prefix_lens), vb.n, vb.heads
    be.init_cuda_graph_state(max_bs=bs, max_num_tokens=bs * n)
    assert be.bundled_verify.workspace is None or be.bundled_verify.workspace.is_cuda
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        be.forward_extend(vb.q, vb.k, vb.v, vb.layer, fb)  # warm-up outside capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    calls0 = be.bundled_verify.bundled_calls
    with torch.cuda.graph(graph):
        o_graph = be.forward_extend(vb.q, vb.k, vb.v, vb.layer, fb)
    assert be.bundled_verify.bundled_calls == calls0 + 1, "capture did not go through the bundled kernel"
    o_graph.zero_()
    graph.replay()
    torch.cuda.synchronize()
    return bool(torch.equal(o_graph.view(-1, H, 512), o_eager))


def run(quick: bool) -> dict:
    reason = _setup()
    if reason:
        return _blocked(reason)
    import sglang
    import torch

    from verify_tools.parity import lm_head

    w = lm_head("cuda")
    runnable, skipped = _cases(quick)
    rows = []
    for i, spec in enumerate(runnable):
        try:
            rows.append(run_case(spec, w, graph=i < GRAPH_CASES))
        except Exception as exc:
            rows.append(
                {
                    "name": spec.name,
                    "ok": False,
                    "error": f"{type(exc).__name__}: {exc}",
                    "traceback": traceback.format_exc()[-1500:],
                }
            )
        torch.cuda.empty_cache()
    failed = [r for r in rows if not r["ok"]]
    return {
        "ok": bool(rows) and not failed,
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "sglang_version": getattr(sglang, "__version__", None),
        "cases": rows,
        "skipped": skipped,
        "summary": {
            "cases_total": len(rows),
            "cases_failed": len(failed),
            "cases_skipped": len(skipped),
            "token_mismatches": sum(r.get("token_mismatches_vs_sglang", 0) for r in rows),
            "near_ties": sum(r.get("near_ties_vs_sglang", 0) for r in rows),
            "all_ran_bundled_kernel": all(r.get("ran_bundled_kernel") for r in rows),
            "graph_cases_equal": [r["graph_replay_equal"] for r in rows if "graph_replay_equal" in r],
            "max_rel_err_plugin_vs_sglang": max((r.get("rel_err_plugin_vs_sglang", 0) for r in rows), default=None),
        },
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--quick", action="store_true", help="the parity suite's quick cases and the seed case")
    ap.add_argument("--out", help="also write the JSON document here")
    args = ap.parse_args(argv)
    doc = run(args.quick)
    text = json.dumps(doc, indent=1, default=str)
    if args.out:
        Path(args.out).write_text(text + "\n")
    if args.json:
        print(text)
    else:
        s = doc["summary"]
        print(f"plugin GPU check: {'ok' if doc['ok'] else 'FAILED'} {doc.get('blocked', '')} {s}")
    return EXIT_BLOCKED if doc.get("blocked") else (0 if doc["ok"] else 1)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())

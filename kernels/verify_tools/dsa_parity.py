"""Parity suite of the sparse (DSA) MLA verify kernel against the float64 oracle (phase 1).

Usage: python -m verify_tools.dsa_parity [--json] [--quick] [--cases NAME,...] [--configs auto|all]

Inputs are built as SGLang's dsa backend builds them (dsa_verify/inputs.py: chain drafts, rows
shorter than topk with -1 tail padding, prefixes shorter than topk where a row lists every causal
token, fp8 656-byte rows with extreme per-block scales, hostile indices, CUDA-graph padding rows,
NaN-poisoned unused slots, H 8/16/64/128). Every case runs for every tile config built for the
device's arch (on sm_90a also the sm_120a configs m16 and m32). Checks per (case, config):
(a) error vs the float64 oracle: ||o - ref|| / ||ref|| <= REL_FRO_BOUND = 4u (u = 2^-9; the
    kernel rounds P to bf16 before PV, fp8 K/V are dequantized to bf16, the output is bf16),
    per element |o - ref| <= MAX_ABS_BOUND * max|ref|; the same Frobenius bound per 128-dim
    block (the extreme-scale case spans 2^-62..2^62 across blocks); every output finite;
    LSE within LSE_BOUND * max(1, |lse|), 8u for fp8 rows (empty rows: -inf on both sides);
(b) token exactness: argmax of o @ W (seeded LM head [512, 4096]) equals the oracle's on every
    (row, head) except near ties (oracle top-2 margin < 0.01 x the row's logit std);
(c) determinism: REPEATS runs bitwise identical; (d) no fault: hostile cases synchronize cleanly.
Plus a CUDA-graph case per config: captured once with a persistent workspace, then q, the cache,
page_table_1 and seq_lens are rewritten in place with a second draw and the graph replayed.
SGLang 0.5.23's own DSA Triton kernel runs on the same bf16 inputs where it imports (its error
vs the oracle is reported, not gated). Exit 0 all pass, 1 a check failed, 75 no CUDA device.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time

from dsa_verify.inputs import DsaCase, make_inputs
from tool_contract import EXIT_BLOCKED, emit
from tool_contract import blocked_doc as tool_blocked_doc

U_BF16 = 2.0**-9
REL_FRO_BOUND = 4 * U_BF16
MAX_ABS_BOUND = 8 * U_BF16
LSE_BOUND = 4 * U_BF16
LSE_BOUND_FP8 = 8 * U_BF16  # fp8 rows: the dequantized K is rounded to bf16 (u/2 per element) once more
NEAR_TIE_EPS = 0.01
VOCAB = 4096
REPEATS = 3

CASES = (
    DsaCase("glm5_b1_n4_h8_L32k_bf16", (32768,), 4, 8, seed=1, notes="the headline shape (GLM-5 TP8, MTP n=4)"),
    DsaCase("glm5_b1_n4_h8_L32k_fp8", (32768,), 4, 8, kv="fp8", seed=2, notes="same, fp8 656-byte rows"),
    DsaCase(
        "short_prefix_b3_n8_h16_bf16",
        (0, 100, 2040),
        8,
        16,
        seed=3,
        notes="rows holding every causal token (L+i+1 <= 2048), -1 tails, and rows crossing 2048",
    ),
    DsaCase("short_prefix_b3_n8_h16_fp8", (0, 100, 2040), 8, 16, kv="fp8", seed=4, notes="same, fp8"),
    DsaCase(
        "fp8_extreme_scales_b2_n4_h8", (5000, 1500), 4, 8, kv="fp8", extreme_scales=True, seed=5, notes="2^-62..2^62"
    ),
    DsaCase(
        "hostile_b2_n4_h64_bf16",
        (9000, 700),
        4,
        64,
        hostile=True,
        pad_rows=3,
        seed=6,
        notes="5% of used entries negative / >= slots / INT32_MAX; seq_lens < 0, 0, > topk; graph pad rows",
    ),
    DsaCase(
        "dsv32_b1_n4_h16_L32k_fp8",
        (32768,),
        4,
        16,
        kv="fp8",
        seed=17,
        notes="DeepSeek-V3.2 at TP8 (H=16), MTP n=4, fp8",
    ),
    DsaCase("hostile_b2_n4_h16_fp8", (9000, 700), 4, 16, kv="fp8", hostile=True, pad_rows=2, seed=7),
    DsaCase(
        "hostile_b1_n4_h8_bf16",
        (9000,),
        4,
        8,
        hostile=True,
        seed=14,
        notes="the headline shape with hostile entries",
    ),
    DsaCase("hostile_b1_n4_h8_fp8", (9000,), 4, 8, kv="fp8", hostile=True, seed=15),
    DsaCase("b2_n4_h128_bf16", (9000, 3000), 4, 128, seed=8, notes="H=128 (two or more head tiles)"),
    DsaCase("b2_n4_h128_fp8", (9000, 3000), 4, 128, kv="fp8", seed=9),
    DsaCase("b8_n4_h64_fp8", tuple(3000 + 977 * i for i in range(8)), 4, 64, kv="fp8", seed=10, notes="T=32, H=64"),
    DsaCase("b8_n8_h16_bf16", tuple(20000 + 311 * i for i in range(8)), 8, 16, seed=11, notes="T=64 splits"),
    DsaCase("b64_n4_h8_bf16", (2500,) * 64, 4, 8, seed=12, notes="T=256, one split (bandwidth regime)"),
    DsaCase("b64_n4_h8_fp8", (2500,) * 64, 4, 8, kv="fp8", seed=13, notes="T=256 fp8"),
    DsaCase(
        "fp8_scale_spikes_b2_n4_h64",
        (9000, 3000),
        4,
        64,
        kv="fp8",
        scale_spikes=True,
        seed=16,
        notes="a split's later tile has a scale above 128x its first tile's block maximum (lazy sigma's exact step)",
    ),
)
QUICK = ("glm5_b1_n4_h8_L32k_bf16", "glm5_b1_n4_h8_L32k_fp8", "hostile_b2_n4_h64_bf16", "fp8_extreme_scales_b2_n4_h8")
GRAPH_CASES = ("glm5_b1_n4_h8_L32k_bf16", "glm5_b1_n4_h8_L32k_fp8", "hostile_b2_n4_h64_bf16")


def lm_head(device, seed: int = 1234):
    import torch

    g = torch.Generator().manual_seed(seed)
    return (torch.randn(512, VOCAB, generator=g, dtype=torch.float64) / 512**0.5).to(device)


def errors(out, ref) -> dict:
    import torch

    o = out.to(torch.float64)
    finite = bool(torch.isfinite(o).all())
    den = float(ref.norm())
    rel = float((o - ref).norm() / den) if den > 0 else float((o - ref).norm())
    mx = float(ref.abs().max())
    max_abs = float((o - ref).abs().max())
    blocks = []
    for k in range(4):
        rb, ob = ref[..., 128 * k : 128 * k + 128], o[..., 128 * k : 128 * k + 128]
        d = float(rb.norm())
        blocks.append(float((ob - rb).norm() / d) if d > 0 else float((ob - rb).norm()))
    return {
        "finite": finite,
        "rel_fro": rel,
        "rel_fro_block_max": max(blocks),
        "max_abs_over_max_ref": max_abs / mx if mx > 0 else max_abs,
    }


def lse_error(lse, ref_lse) -> float:
    import torch

    r = ref_lse.to(torch.float64)
    x = lse.to(torch.float64)
    both_empty = torch.isinf(r) & (r < 0) & torch.isinf(x) & (x < 0)
    diff = torch.where(both_empty, torch.zeros_like(r), (x - r).abs() / r.abs().clamp(min=1.0))
    diff = torch.nan_to_num(diff, nan=float("inf"))
    return float(diff.max()) if diff.numel() else 0.0


def token_check(out, ref, w) -> dict:
    import torch

    lo = out.reshape(-1, 512).to(torch.float64) @ w
    lr = ref.reshape(-1, 512).to(torch.float64) @ w
    live = ref.reshape(-1, 512).abs().sum(-1) > 0  # empty rows have no token
    top2 = torch.topk(lr, 2, dim=-1).values
    margin = top2[:, 0] - top2[:, 1]
    tie = margin < NEAR_TIE_EPS * lr.std(dim=-1)
    same = lo.argmax(-1) == lr.argmax(-1)
    bad = (~same) & (~tie) & live
    return {
        "rows": int(live.sum()),
        "mismatches": int(bad.sum()),
        "near_ties": int((tie & live).sum()),
        "token_exact": int(bad.sum()) == 0,
    }


def sglang_triton():
    """(callable, None) running SGLang 0.5.23's DSA Triton kernel, or (None, reason)."""
    first = None
    try:
        from sglang.kernels.ops.attention.dsa.triton_sparse_mla import triton_sparse_mla_fwd
    except Exception as exc:  # any import-chain failure: retry without sglang/__init__ (server deps)
        first = f"{type(exc).__name__}: {exc}"
    if first is not None:
        try:
            import importlib.util
            import types
            from pathlib import Path

            spec = importlib.util.find_spec("sglang")
            if spec is None or not spec.submodule_search_locations:
                return None, f"sglang not installed ({first})"
            for k in [k for k in sys.modules if k == "sglang" or k.startswith("sglang.")]:
                del sys.modules[k]
            pkg = types.ModuleType("sglang")
            pkg.__path__ = list(spec.submodule_search_locations)
            sys.modules["sglang"] = pkg
            shim_dir = Path(__file__).resolve().parents[2] / "tests" / "integration"
            if (shim_dir / "sgl_kernel_import_shim.py").exists():
                sys.path.insert(0, str(shim_dir))
                import sgl_kernel_import_shim

                sgl_kernel_import_shim.install()
            from sglang.kernels.ops.attention.dsa.triton_sparse_mla import triton_sparse_mla_fwd
        except Exception as exc:
            return None, f"sglang DSA Triton kernel not importable: {first}; without sglang/__init__: {exc}"[:400]

    def run(q_all, kv_cache, page_table_1, sm_scale):
        return triton_sparse_mla_fwd(
            q_all[..., :512], q_all[..., 512:], kv_cache, page_table_1.unsqueeze(1), sm_scale, 512
        ).squeeze(0)

    return run, None


def configs_for(arch: str, which: str) -> list:
    """Config labels: "auto" (what a plain call runs), each tile config built for the arch, on
    sm_90a "<name>/cluster" for the configs whose splits can merge in a thread-block cluster, and
    "auto/sliced" / "auto/wide" (auto's plan with that combine kernel forced, so every case runs both
    whatever T x H picks). A comma list may also name the experimental configs (sm_90a; never part
    of "all")."""
    from dsa_verify import tiles

    if which == "auto":
        return ["auto"]
    if which != "all":  # a comma list of labels, each one configs_for(arch, "all") has
        every = configs_for(arch, "all") + (list(tiles.EXPERIMENTAL_CONFIGS) if arch == "sm_90a" else [])
        picked = [x for x in which.split(",") if x]
        bad = [x for x in picked if x not in every]
        if bad or not picked:
            raise ValueError(f"--configs: {','.join(bad) or which!r} not among {','.join(every)} ({arch})")
        return picked
    out = ["auto"]
    for c in tiles.ARCH_CONFIGS[arch]:
        out.append(c.name)
        if arch == "sm_90a" and c.name in tiles.CLUSTER_CONFIGS:
            out.append(c.name + "/cluster")
    return out + ["auto/sliced", "auto/wide"]


def call_kwargs(label: str) -> dict:
    """dsa_verify_fwd keywords of a config label ("m16", "m16/cluster", "auto", "auto/wide")."""
    name, _, combine = label.partition("/")
    return {"tile_config": name, "combine": combine or "auto"}


def run_case(spec: DsaCase, cfg: str, w, device, peer=None) -> dict:
    import torch

    from dsa_verify.api import dsa_verify_fwd
    from dsa_verify.reference import dsa_verify_ref

    d = make_inputs(spec, device)
    args = (d["q_all"], d["kv_cache"], d["page_table_1"], d["seq_lens"], d["sm_scale"])
    ref, ref_lse = dsa_verify_ref(*args)
    outs = []
    lse = None
    t0 = time.time()
    for _ in range(REPEATS):
        o = torch.full((d["meta"]["T"], spec.heads, 512), float("nan"), dtype=torch.bfloat16, device=device)
        lse = torch.full((d["meta"]["T"], spec.heads), float("nan"), dtype=torch.float32, device=device)
        dsa_verify_fwd(*args, out=o, lse=lse, **call_kwargs(cfg))
        outs.append(o)
    torch.cuda.synchronize()
    secs = time.time() - t0
    err = errors(outs[0], ref)
    det = all(torch.equal(outs[0].view(torch.int16), x.view(torch.int16)) for x in outs[1:])
    tok = token_check(outs[0], ref, w)
    lerr = lse_error(lse, ref_lse)
    ok = (
        err["finite"]
        and err["rel_fro"] <= REL_FRO_BOUND
        and err["rel_fro_block_max"] <= REL_FRO_BOUND
        and err["max_abs_over_max_ref"] <= MAX_ABS_BOUND
        and lerr <= (LSE_BOUND_FP8 if spec.kv == "fp8" else LSE_BOUND)
        and det
        and tok["token_exact"]
    )
    res = {
        "case": spec.name,
        "config": cfg,
        "kv": spec.kv,
        "T": d["meta"]["T"],
        "H": spec.heads,
        "ok": bool(ok),
        **err,
        "lse_rel_err": lerr,
        "deterministic": det,
        **tok,
        "seconds": round(secs, 3),
        "notes": spec.notes,
    }
    if peer is not None and spec.kv == "bf16" and not spec.hostile and cfg in ("auto", "m16"):
        try:
            po = peer(d["q_all"], d["kv_cache"], d["page_table_1"], d["sm_scale"])
            res["sglang_triton"] = errors(po, ref) | {"token_exact": token_check(po, ref, w)["token_exact"]}
        except Exception as exc:
            res["sglang_triton"] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    return res


def graph_case(spec: DsaCase, cfg: str, w, device) -> dict:
    """Capture with draw A, rewrite q / cache / page_table_1 / seq_lens in place with draw B, replay."""
    import torch

    from dsa_verify.api import dsa_verify_fwd, workspace_numel_for
    from dsa_verify.reference import dsa_verify_ref

    a = make_inputs(spec, device)
    b = make_inputs(spec, device, gen_seed=spec.seed + 1000)
    if a["kv_cache"].shape != b["kv_cache"].shape:
        return {"case": spec.name, "config": cfg, "graph": True, "ok": False, "error": "draws differ in shape"}
    q, kv, pt, sl = (x.clone() for x in (a["q_all"], a["kv_cache"], a["page_table_1"], a["seq_lens"]))
    T, H = q.shape[0], q.shape[1]
    kw = call_kwargs(cfg)
    ws = torch.empty(max(1, workspace_numel_for(q, kv, pt, **kw)), dtype=torch.float32, device=device)
    out = torch.empty(T, H, 512, dtype=torch.bfloat16, device=device)
    lse = torch.empty(T, H, dtype=torch.float32, device=device)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        dsa_verify_fwd(q, kv, pt, sl, spec.sm_scale, out=out, lse=lse, workspace=ws, **kw)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        dsa_verify_fwd(q, kv, pt, sl, spec.sm_scale, out=out, lse=lse, workspace=ws, **kw)
    res = {"case": spec.name + "_graph", "config": cfg, "graph": True, "kv": spec.kv, "T": T, "H": H}
    ok = True
    for tag, d in (("B", b), ("A", a)):
        q.copy_(d["q_all"])
        kv.copy_(d["kv_cache"])
        pt.copy_(d["page_table_1"])
        sl.copy_(d["seq_lens"])
        out.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        ref, ref_lse = dsa_verify_ref(d["q_all"], d["kv_cache"], d["page_table_1"], d["seq_lens"], spec.sm_scale)
        e = errors(out, ref)
        tok = token_check(out, ref, w)
        le = lse_error(lse, ref_lse)
        lb = LSE_BOUND_FP8 if spec.kv == "fp8" else LSE_BOUND
        good = e["finite"] and e["rel_fro"] <= REL_FRO_BOUND and tok["token_exact"] and le <= lb
        res[f"replay_{tag}"] = e | {"token_exact": tok["token_exact"], "lse_rel_err": le, "ok": bool(good)}
        ok = ok and good
    res["ok"] = bool(ok)
    return res


def blocked_doc(reason: str) -> dict:
    return tool_blocked_doc(reason, cases=[], summary={"passed": 0, "failed": 0, "total": 0})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m verify_tools.dsa_parity", description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print one JSON document")
    ap.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}")
    ap.add_argument("--cases", default="", help="comma-separated case names")
    ap.add_argument("--configs", default="all", help="tile configs to run: auto, all, or a comma list of labels")
    ap.add_argument("--no-graph", action="store_true", help="skip the CUDA-graph replay cases")
    ap.add_argument("--no-peer", action="store_true", help="skip SGLang's DSA Triton kernel")
    ap.add_argument(
        "--sm120-occupancy",
        action="store_true",
        help="sm_90a only: every config under the sm_120 occupancy emulation, with sm_120a's configs and plans",
    )
    ap.add_argument(
        "--out",
        default="",
        help="also write the JSON document to this file, rewritten after every case (a timed-out run leaves its cases)",
    )
    a = ap.parse_args(argv)
    try:
        import torch
    except Exception as exc:
        return _emit(blocked_doc(f"torch not importable: {exc}"), a.json, EXIT_BLOCKED)
    if not torch.cuda.is_available():
        return _emit(blocked_doc(f"no CUDA device on host {socket.gethostname()}"), a.json, EXIT_BLOCKED)
    from dsa_verify.api import device_info

    device = torch.device("cuda", torch.cuda.current_device())
    arch, sms = device_info(device)
    if a.sm120_occupancy:  # what a Blackwell host runs (configs, plans, CTAs per SM), on this device
        from dsa_verify.api import emulate_sm120_occupancy

        try:
            emulate_sm120_occupancy(device)
        except ValueError as exc:
            return _emit(blocked_doc(f"--sm120-occupancy: {exc}"), a.json, EXIT_BLOCKED)
        arch = "sm_120a"
    names = [c.name for c in CASES]
    wanted = set(QUICK) if a.quick else set(names)
    if a.cases:
        wanted = set(a.cases.split(","))
        unknown = wanted - set(names)
        if unknown:
            print(f"unknown cases: {sorted(unknown)}", file=sys.stderr)
            return 2
    try:
        cfgs = configs_for(arch, a.configs)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    peer, peer_reason = (None, "disabled (--no-peer)") if a.no_peer else sglang_triton()
    w = lm_head(device)
    results = []
    # order: the quick cases, their graph replays, then the rest (a timeout keeps the first parts)
    jobs = [("case", c) for c in CASES if c.name in wanted and c.name in QUICK]
    if not a.no_graph:
        jobs += [("graph", c) for c in CASES if c.name in wanted and c.name in GRAPH_CASES]
    jobs += [("case", c) for c in CASES if c.name in wanted and c.name not in QUICK]
    from dsa_verify import tiles

    skipped = []
    for kind, spec in jobs:
        for cfg in cfgs:
            if not tiles.has_kernel(cfg, spec.kv == "fp8"):
                kind_only = (
                    "a bf16-only config (no fp8 kernel)" if spec.kv == "fp8" else "an fp8-only config (no bf16 kernel)"
                )
                skipped.append({"case": spec.name, "config": cfg, "reason": kind_only})
                continue
            try:
                if kind == "case":
                    results.append(run_case(spec, cfg, w, device, peer if cfg == cfgs[0] else None))
                else:
                    results.append(graph_case(spec, cfg, w, device))
            except Exception as exc:
                name = spec.name + ("_graph" if kind == "graph" else "")
                results.append({"case": name, "config": cfg, "ok": False, "error": f"{type(exc).__name__}: {exc}"})
            if a.out:
                _write(a.out, {"ok": None, "partial": True, "arch": arch, "cases": results})
    passed = sum(1 for r in results if r["ok"])
    doc = {
        "ok": bool(results) and passed == len(results),
        "host": socket.gethostname(),
        "device": torch.cuda.get_device_name(device),
        "arch": arch,
        "sm120_occupancy": a.sm120_occupancy,
        "sms": sms,
        "bounds": {
            "rel_fro": REL_FRO_BOUND,
            "max_abs_over_max_ref": MAX_ABS_BOUND,
            "lse_rel": LSE_BOUND,
            "lse_rel_fp8": LSE_BOUND_FP8,
        },
        "sglang_triton": "ran" if peer else peer_reason,
        "cases": results,
        "skipped": skipped,
        "summary": {"passed": passed, "failed": len(results) - passed, "total": len(results)},
    }
    if a.out:
        _write(a.out, doc)
    return _emit(doc, a.json, 0 if doc["ok"] else 1)


def _write(path: str, doc: dict) -> None:
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)


def _emit(doc: dict, as_json: bool, code: int) -> int:
    return emit(doc, as_json, code, human=_print_cases)


def _print_cases(doc: dict) -> None:
    for r in doc["cases"]:
        print(
            f"{'PASS' if r['ok'] else 'FAIL'} {r['case']:<40} {r.get('config', ''):<5} "
            f"rel={r.get('rel_fro', r.get('replay_B', {}).get('rel_fro', float('nan'))):.2e} "
            f"{r.get('error', '')}"
        )
    print(json.dumps(doc["summary"]))


if __name__ == "__main__":
    sys.exit(main())

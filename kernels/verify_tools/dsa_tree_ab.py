"""Development A/B of DSA kernel source trees (not a phase step).

Usage: python -m verify_tools.dsa_tree_ab --trees base=DIR[,NAME=DIR...] --shapes B:L:n:H,...
       [--configs auto,m16] [--kv bf16,fp8] [--reps 20] [--rounds 3] [--sm120-occupancy] [--out FILE]

Each tree is another copy of dsa_verify's csrc/ (an older commit's, or a variant's), JIT-built beside this
checkout's own build ("cur") with the experimental build's flags (the shipped kernels, the experimental
configs and the sm_120 occupancy emulation), so that one process times them all on the same inputs. DIR is
<root>/kernels/dsa_verify/csrc of a copy that also holds <root>/kernels/mla_verify/csrc (the wgmma headers are
included by relative path), e.g. `git archive REV kernels/dsa_verify/csrc kernels/mla_verify/csrc | tar -x -C
ROOT`. Per shape, cache and tile config every tree's call is captured in a CUDA graph and timed by CUPTI kernel
spans after an L2 flush (dsa_bench.Timer.kernel_spans, median of --reps), the trees interleaved, --rounds times;
the minimum over rounds is reported with its ratio to tree "base" and whether the output equals base's bit for
bit. A variant that fails records its error and the run goes on.
Exit 0 ok, 1 a variant failed, 2 bad arguments (nothing runs), 75 no CUDA device.
"""

from __future__ import annotations

import argparse
import functools
import json
import socket
import sys
from pathlib import Path

from tool_contract import EXIT_BLOCKED, emit
from verify_tools.bench import parse_shapes
from verify_tools.dsa_bench import SM_SCALE, TOPK, Timer, blocked_doc


def load_tree(arch: str, csrc_dir: str):
    """JIT build of another copy of dsa_verify's csrc/ with the experimental build's flags."""
    from dsa_verify import _build
    from mla_verify._build import compile_tree

    return compile_tree(
        arch,
        csrc_dir,
        prefix="dsa_verify",
        sources=_build.SOURCES,
        headers=_build.HEADERS,
        nvcc=_build.nvcc_flags(arch),
        extra=[_build.EXPERIMENTAL_FLAG],
    )


class TreeModule:
    """Routes dsa_verify_fwd (and the planner's occupancy queries) through `mod` while active: the
    api looks `_build.load` / `_build.load_experimental` up per call."""

    def __init__(self, mod):
        self.mod = mod

    def __enter__(self):
        from dsa_verify import _build

        self.prev = (_build.load, _build.load_experimental)
        _build.load = _build.load_experimental = lambda arch, m=self.mod: m
        return self

    def __exit__(self, *exc):
        from dsa_verify import _build

        _build.load, _build.load_experimental = self.prev
        return False


def parse_trees(text: str) -> dict[str, str]:
    """NAME=DIR,... -> {name: dir}; ValueError on an empty list, a missing '=', a reserved or repeated name."""
    items = [x for x in text.split(",") if x]
    if not items or any("=" not in x or x.startswith("=") or x.endswith("=") for x in items):
        raise ValueError(f"want NAME=DIR,..., got {text!r}")
    names = [x.split("=", 1)[0] for x in items]
    if "cur" in names or len(set(names)) != len(names):
        raise ValueError(f"tree names must be unique and not 'cur' (this checkout): {','.join(names)}")
    return dict(x.split("=", 1) for x in items)


def run(device, mods: dict, shapes, configs, kvs, reps: int, rounds: int) -> dict:
    import torch

    from dsa_verify.api import dsa_verify_fwd, workspace_numel_for
    from dsa_verify.inputs import DsaCase, make_inputs
    from dsa_verify.layout import quantize_cache

    timer = Timer(device)
    doc: dict = {"trees": list(mods), "configs": list(configs), "kvs": list(kvs), "reps": reps, "rows": []}
    failed = 0
    for B, L, n, H in shapes:
        d = make_inputs(DsaCase(f"b{B}_L{L}_n{n}_h{H}", (L,) * B, n, H, seed=B * 7 + n, poison=False), device)
        q, pt, sl = d["q_all"], d["page_table_1"], d["seq_lens"]
        caches = {"bf16": d["kv_cache"]}
        if "fp8" in kvs:  # quantized once per shape, only when asked for
            caches["fp8"] = quantize_cache(d["kv_cache"])
        for kv in kvs:
            for cfg in configs:
                row: dict = {"B": B, "L": L, "n": n, "H": H, "T": q.shape[0], "kv": kv, "config": cfg, "topk": TOPK}
                graphs, outs, errors = {}, {}, {}
                for name, mod in mods.items():
                    try:
                        with TreeModule(mod):
                            ws_n = workspace_numel_for(q, caches[kv], pt, cfg)
                            ws = torch.empty(max(1, ws_n), dtype=torch.float32, device=device)
                            out = torch.empty(q.shape[0], H, 512, dtype=torch.bfloat16, device=device)
                            fn = functools.partial(
                                dsa_verify_fwd, q, caches[kv], pt, sl, SM_SCALE, out=out, workspace=ws, tile_config=cfg
                            )
                            graphs[name] = timer.graph(fn)
                        outs[name] = out
                    except Exception as exc:  # the row records it; the other variants still run
                        errors[name] = f"{type(exc).__name__}: {exc}"[:300]
                spans: dict = {name: [] for name in graphs}
                for _ in range(rounds):  # graph replays only: a direct call would run this checkout's build
                    for name, r in timer.kernel_spans(graphs, reps).items():
                        if "s" in r:
                            spans[name].append(r["s"])
                        else:
                            errors.setdefault(name, r.get("error", "no timing"))
                row["us"] = {k: round(min(v) * 1e6, 3) for k, v in spans.items() if v}
                if errors:
                    row["errors"] = errors
                    failed += len(errors)
                if "base" in row["us"]:
                    row["ratio_over_base"] = {k: round(v / row["us"]["base"], 4) for k, v in row["us"].items()}
                    row["bitwise_equal_base"] = {k: bool(torch.equal(outs[k], outs["base"])) for k in row["us"]}
                doc["rows"].append(row)
                print(
                    f"[tree-ab] {B}:{L}:{n}:{H} {kv} {cfg}: {row['us']} {row.get('ratio_over_base')}", file=sys.stderr
                )
    doc["failed"] = failed
    return doc


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m verify_tools.dsa_tree_ab", description=__doc__.splitlines()[0])
    ap.add_argument("--trees", required=True, help="NAME=CSRC_DIR,...: the trees beside this checkout ('cur')")
    ap.add_argument("--shapes", required=True, help="B:L:n:H,... (dsa_bench's shape syntax)")
    ap.add_argument("--configs", default="auto", help="tile configs each tree runs, comma-separated (auto, m16, ...)")
    ap.add_argument("--kv", default="bf16,fp8", help="caches, comma-separated (bf16, fp8)")
    ap.add_argument("--reps", type=int, default=20, help="flushed replays per timing (median)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved timings per variant (minimum reported)")
    ap.add_argument("--sm120-occupancy", action="store_true", help="every tree under the sm_120 occupancy emulation")
    ap.add_argument("--out", default="", help="also write the JSON document here")
    a = ap.parse_args(argv)
    try:  # checked before any device work: bad input exits 2 and runs nothing
        trees = parse_trees(a.trees)
        shapes = parse_shapes(a.shapes)
    except ValueError as exc:
        ap.error(str(exc))
    from dsa_verify import tiles

    configs = [c for c in a.configs.split(",") if c]
    every = {"auto", *tiles.CONFIGS, *tiles.EXPERIMENTAL_CONFIGS}
    bad = [c for c in configs if c not in every] or ([] if configs else ["(none)"])
    if bad:
        ap.error(f"--configs: {','.join(bad)} not among {','.join(sorted(every))}")
    kvs = [k for k in a.kv.split(",") if k]
    if not kvs or any(k not in ("bf16", "fp8") for k in kvs):
        ap.error(f"--kv: want bf16 and/or fp8, got {a.kv!r}")
    if a.reps < 1 or a.rounds < 1:
        ap.error("--reps and --rounds must be >= 1")
    try:
        import torch
    except Exception as exc:
        return emit(blocked_doc(f"torch not importable: {exc}"), True, EXIT_BLOCKED)
    if not torch.cuda.is_available():
        return emit(blocked_doc(f"no CUDA device on host {socket.gethostname()}"), True, EXIT_BLOCKED)
    from dsa_verify import _build
    from dsa_verify.api import device_info, emulate_sm120_occupancy

    device = torch.device("cuda", torch.cuda.current_device())
    arch, _ = device_info(device)
    mods = {"cur": _build.load_experimental(arch)}
    mods.update({k: load_tree(arch, v) for k, v in trees.items()})
    if a.sm120_occupancy:
        for mod in mods.values():
            with TreeModule(mod):
                emulate_sm120_occupancy(device)
    doc = run(device, mods, shapes, configs, kvs, a.reps, a.rounds)
    doc.update({"tree_dirs": trees, "arch": arch, "sm120_occupancy": a.sm120_occupancy})
    if a.out:
        Path(a.out).write_text(json.dumps(doc, indent=1), encoding="utf-8")
    print(json.dumps(doc, indent=1))
    return 1 if doc["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())

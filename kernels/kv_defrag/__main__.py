"""``python -m kv_defrag --validate | --bench [--json] [options]``.

Exit codes (plans/0001 section 2): 0 ok, 1 a check failed, 2 usage / invalid option,
75 blocked (``--bench`` without a CUDA device). With ``--json`` stdout holds exactly one
JSON document; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys

from tool_contract import EXIT_BLOCKED, EXIT_OK, EXIT_USAGE, emit
from tool_contract import EXIT_FAILED as EXIT_FAIL

CPU_DEFAULT_SLOTS, CPU_DEFAULT_LAYERS = 16384, 4
GPU_DEFAULT_SLOTS, MAX_LAYERS = 1 << 20, 61  # DeepSeek-V3: 61 layers


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m kv_defrag", description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--validate", action="store_true", help="churn, plan, relocate, check every live token")
    mode.add_argument("--bench", action="store_true", help="bandwidth, planner scaling, verify-kernel gain (CUDA)")
    ap.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    ap.add_argument("--slots", type=int, help="usable pool slots (default 16384 on CPU, 1048576 on CUDA)")
    ap.add_argument("--layers", type=int, help="layers (default 4 on CPU; on CUDA as many as fit --mem-frac, <= 61)")
    ap.add_argument("--mem-frac", type=float, default=0.5, help="fraction of free device memory for KV buffers")
    ap.add_argument("--dtype", choices=("bf16", "fp8"), default="bf16", help="cache storage: bf16, or fp8 as uint8")
    ap.add_argument("--min-run", type=int, default=None, help="minimum run length P (default: one run per request)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    ap.add_argument("--backend", choices=("auto", "torch", "triton"), default="auto", help="copy-step backend")
    ap.add_argument(
        "--kernel",
        choices=("rows", "segments"),
        default="rows",
        help="validate: Triton copy kernel variant (bench times both)",
    )
    ap.add_argument("--block-m", type=int, default=8, help="validate: rows (or segments) per Triton program")
    ap.add_argument("--planner-sizes", default="1000,10000,100000,1000000", help="bench: pool sizes for planner time")
    ap.add_argument("--batch", type=int, default=16, help="bench: requests in the verify batch (longest first)")
    ap.add_argument("--draft", type=int, default=8, help="bench: draft tokens per request")
    ap.add_argument("--heads", type=int, default=16, help="bench: query heads")
    ap.add_argument("--reps", type=int, default=10, help="bench: timed repetitions")
    ap.add_argument(
        "--verify",
        choices=("auto", "torch"),
        default="auto",
        help="bench: verify kernel; auto = bundled mla_verify, else the torch gather fallback",
    )
    return ap


def _emit(doc: dict, as_json: bool) -> None:
    emit(doc, as_json, human=_print_summary, indent=None, default=float)


def _print_summary(doc: dict) -> None:
    s = doc.get("summary", {})
    for k, v in s.items():
        if isinstance(v, dict):
            v = ", ".join(f"{kk}={vv:.4g}" if isinstance(vv, float) else f"{kk}={vv}" for kk, vv in v.items())
        print(f"{k:>22}: {v}")
    print(f"{'ok':>22}: {doc.get('ok')}")


def _usage_error(msg: str, as_json: bool) -> int:
    if as_json:
        print(json.dumps({"ok": False, "error": msg}))
    print(f"error: {msg}", file=sys.stderr)
    return EXIT_USAGE


def main(argv=None) -> int:
    args = _parser().parse_args(argv)

    def log(msg: str) -> None:
        print(f"[defrag] {msg}", file=sys.stderr, flush=True)

    for name in ("slots", "layers", "batch", "draft", "heads", "reps", "block_m"):
        v = getattr(args, name)
        if v is not None and v < 1:
            return _usage_error(f"--{name.replace('_', '-')}: must be >= 1, got {v}", args.json)
    if args.min_run is not None and args.min_run < 1:
        return _usage_error(f"--min-run: must be >= 1, got {args.min_run}", args.json)
    if not 0.0 < args.mem_frac <= 0.9:
        return _usage_error(f"--mem-frac: must lie in (0, 0.9], got {args.mem_frac}", args.json)
    try:
        sizes = [int(x) for x in args.planner_sizes.split(",") if x]
    except ValueError:
        return _usage_error(
            f"--planner-sizes: comma-separated integers expected, got {args.planner_sizes!r}", args.json
        )

    try:
        import torch
    except ImportError as e:
        doc = {"ok": False, "blocked": f"torch not importable: {e}", "summary": {}}
        _emit(doc, args.json)
        return EXIT_BLOCKED
    cuda = torch.cuda.is_available()
    device = ("cuda" if cuda else "cpu") if args.device == "auto" else args.device
    if device == "cuda" and not cuda:
        doc = {"ok": False, "blocked": "no CUDA device (torch.cuda.is_available() is False)", "summary": {}}
        _emit(doc, args.json)
        return EXIT_BLOCKED
    if args.bench and device != "cuda":
        doc = {"ok": False, "blocked": "--bench needs a CUDA device; none here (or --device cpu)", "summary": {}}
        _emit(doc, args.json)
        return EXIT_BLOCKED

    slots = args.slots or (GPU_DEFAULT_SLOTS if device == "cuda" else CPU_DEFAULT_SLOTS)
    if slots < 16:
        return _usage_error(f"--slots: must be >= 16, got {slots}", args.json)
    elem = 2 if args.dtype == "bf16" else 1
    layers = args.layers
    if layers is None:
        if device == "cuda":
            free, _ = torch.cuda.mem_get_info()
            budget = int(args.mem_frac * free)
            if budget < (slots + 1) * 576 * elem and not args.slots:
                slots = budget // (576 * elem) - 1  # a live server holds most memory: shrink the pool
                log(f"only {free / 2**30:.1f} GiB free: pool shrunk to {slots} slots")
            if budget < (slots + 1) * 576 * elem or slots < 16:
                doc = {
                    "ok": False,
                    "summary": {},
                    "blocked": f"not enough free device memory: {free / 2**30:.1f} GiB free, --mem-frac {args.mem_frac}",
                }
                _emit(doc, args.json)
                return EXIT_BLOCKED
            layers = int(max(1, min(MAX_LAYERS, budget // ((slots + 1) * 576 * elem))))
        else:
            layers = CPU_DEFAULT_LAYERS
    log(
        f"device={device} slots={slots} layers={layers} dtype={args.dtype} "
        f"kv_bytes={layers * (slots + 1) * 576 * elem / 2**30:.1f} GiB"
    )

    from .pool import PoolError

    try:
        if args.validate:
            from .validate import run_validate

            doc = run_validate(
                slots,
                layers,
                args.dtype,
                device,
                args.min_run,
                args.seed,
                args.backend,
                log,
                kernel_kind=args.kernel,
                block_m=args.block_m,
            )
        else:
            from .bench import run_bench

            doc = run_bench(
                slots,
                layers,
                args.dtype,
                args.min_run,
                args.seed,
                args.backend,
                sizes,
                args.batch,
                args.draft,
                args.heads,
                args.reps,
                log,
                use_bundled=args.verify == "auto",
            )
    except PoolError as e:
        return _usage_error(str(e), args.json)
    except Exception as e:  # noqa: BLE001 - a crash is a failed check, reported as one document
        import traceback

        traceback.print_exc(file=sys.stderr)
        doc = {"ok": False, "error": f"{type(e).__name__}: {str(e)[:500]}", "summary": {}}
    _emit(doc, args.json)
    return EXIT_OK if doc["ok"] else EXIT_FAIL


if __name__ == "__main__":
    sys.exit(main())

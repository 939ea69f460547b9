"""Summaries for tests/device/dsa_steps.sh (device calls), one line each:

python3 dsa_ab.py bench OUT ROUNDS T0 T1 ..  per (B, L, n, H, kv): each tree's CUPTI spans (µs) over the rounds of
                                            $OUT/bench_T_i.json and its mean's ratio to T0's
python3 dsa_ab.py alt FILE                   per row of a dsa_bench --alt-config document: ours, the alternative
                                            (config, splits) and its span's ratio to ours, same run
python3 dsa_ab.py parity FILE                a dsa_parity document's summary (and SGLang's peer), then each
                                            failed entry with its error figures
python3 dsa_ab.py trace FILE                 a dsa_bench --trace document's medians per plan (µs)
"""

from __future__ import annotations

import json
import statistics
import sys


def _load(path: str):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as exc:
        print(f"unreadable {path}: {exc}")
        return None


def bench(out: str, rounds: int, trees: list[str]) -> None:
    spans: dict = {}  # key -> tree -> [s]
    plan: dict = {}
    for t in trees:
        for i in range(1, rounds + 1):
            doc = _load(f"{out}/bench_{t}_{i}.json") or {"rows": []}
            for r in doc["rows"]:
                k = (r["B"], r["L"], r["n"], r["H"], r["kv"])
                plan.setdefault(k, f"{r.get('config')} S={r.get('splits')}")
                if r.get("ours_s"):
                    spans.setdefault(k, {}).setdefault(t, []).append(r["ours_s"])
                elif r.get("ours_error"):
                    print("error", t, i, k, r["ours_error"][:120])
    for k, by in spans.items():
        base = by.get(trees[0])
        cols = []
        for t in trees:
            v = by.get(t)
            if not v:
                cols.append(f"{t} -")
                continue
            us = " ".join(f"{x * 1e6:.2f}" for x in v)
            ratio = f" x{statistics.mean(v) / statistics.mean(base):.4f}" if base and t != trees[0] else ""
            cols.append(f"{t} {us}{ratio}")
        print("ab", k, plan[k], " | ".join(cols))


def alt(path: str) -> None:
    for r in (_load(path) or {"rows": []})["rows"]:
        k = (r["B"], r["L"], r["n"], r["H"], r["kv"])
        a = r.get("alt") or {}
        if r.get("ours_s") and a.get("s"):
            print(
                "alt",
                k,
                f"{r.get('config')} S={r.get('splits')} {r['ours_s'] * 1e6:.2f}",
                f"| {a.get('config')} S={a.get('splits')} {a['s'] * 1e6:.2f} x{a['s'] / r['ours_s']:.4f}",
            )
        else:
            why = r.get("ours_error") or a.get("error") or a.get("skipped") or "no span"
            print("alt", k, "no pair:", str(why)[:120])


PARITY_FIELDS = ("rel_fro", "rel_fro_block_max", "lse_rel_err", "mismatches", "deterministic")


def parity(path: str) -> None:
    doc = _load(path)
    if doc is None:
        return
    cases = doc.get("cases", [])
    head = doc.get("summary") or {"partial": len(cases), "passed": sum(bool(r["ok"]) for r in cases)}
    peer = f" sglang_triton: {str(doc['sglang_triton'])[:200]}" if "sglang_triton" in doc else ""
    print(f"parity {head}{peer}")
    for r in cases:
        if not r["ok"]:
            print(
                "FAIL", r["case"], r.get("config"), str(r.get("error", ""))[:100], {k: r.get(k) for k in PARITY_FIELDS}
            )


def trace(path: str) -> None:
    doc = _load(path)
    for lab, v in (doc or {}).items():
        print("trace", lab, {a: (round(b, 2) if isinstance(b, float) else b) for a, b in v.items()})


def main(argv: list[str]) -> int:
    if argv[:1] == ["bench"] and len(argv) >= 4:
        bench(argv[1], int(argv[2]), argv[3:])
    elif argv[:1] in (["alt"], ["parity"], ["trace"]) and len(argv) == 2:
        {"alt": alt, "parity": parity, "trace": trace}[argv[0]](argv[1])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

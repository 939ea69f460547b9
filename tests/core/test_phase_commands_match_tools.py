"""Contract check between phases/*.yaml and the kernel tools: every step command, rendered for a
host of the example fleet (a dsa host) and the same host as dense_mla, is accepted by the argument
parser of the tool it runs
(``python -m <package>[.tool] ...``, run in the bundle). The tool's ``main`` is called with ``parse_args`` spied on and
stopped right after a successful parse, so nothing is compiled, benchmarked or restarted."""

from __future__ import annotations

import argparse
import importlib

import pytest
from core_helpers import REPO

from orchestrator.inventory import load_inventory
from orchestrator.planner import build_plan
from orchestrator.specs import load_catalog
from orchestrator.state import RunState


class Parsed(BaseException):
    """Raised by the spy once the tool's parser accepted the argv (BaseException: no tool catches it)."""


def rendered_commands() -> list[tuple[str, str, list[str]]]:
    catalog = load_catalog(REPO / "phases")
    inv = load_inventory(REPO / "inventory" / "example-blackwell.yaml")
    first = inv.hosts[0]
    assert first.model_family == "dsa"
    hosts = [first, first.model_copy(update={"name": "dense-twin", "model_family": "dense_mla"})]
    plan = build_plan(catalog, list(catalog.phases), inv, hosts, RunState(), "0" * 64, REPO / ".unused-state")
    assert not plan.problems, plan.problems
    out: dict[tuple[str, list[str]], str] = {}
    for ph in plan.phases:
        for s in ph.steps + ph.rollback_steps:
            for c in s.commands:
                argv = c.argv
                if argv[:1] and argv[0].startswith("<builtin:"):
                    continue
                key = (argv[2], tuple(argv[3:]))
                out.setdefault(key, f"{ph.label}:{s.id}" + (f"[{c.model_family}]" if c.model_family else ""))
    return [(where, module, list(args)) for (module, args), where in out.items()]


COMMANDS = rendered_commands()


def shipped_packages() -> set[str]:
    """Top-level packages the bundle manifest ships (``<package>/*.py`` lines of kernels/MANIFEST)."""
    lines = (REPO / "kernels" / "MANIFEST").read_text().splitlines()
    return {ln.split("/", 1)[0] for ln in lines if ln.strip() and not ln.startswith("#") and ln.endswith("/*.py")}


def test_each_family_runs_its_own_kernel_tools():
    assert {m for w, m, _ in COMMANDS if w.startswith(("1-", "2-")) and w.endswith("[dsa]")} == {
        "verify_tools.dsa_parity",
        "verify_tools.dsa_bench",
    }
    assert {m for w, m, _ in COMMANDS if w.startswith(("1-", "2-")) and w.endswith("[dense_mla]")} == {
        "verify_tools.parity",
        "verify_tools.bench",
    }


def test_the_dsa_bench_summary_the_phase_2_gates_read_names_the_shapes_they_gate():
    """Phase 2's dsa gates read dsa_bench's `summary` block (no row index): every gated path is in
    the blocked document too, and summarize() takes each value from the shape its gate's reason
    names (B, L, n, H, kv), whatever the row order."""
    from verify_tools import dsa_bench

    catalog = load_catalog(REPO / "phases")
    bench = catalog.by_id(2).spec.step("bench").for_family("dsa")
    metrics = {g.metric for g in bench.gates}
    assert not any(m.startswith("rows.") for m in metrics), "gate the summary block, not row indices"
    assert {
        "summary.headline_speedup_vs_sglang_triton",
        "summary.headline_sol",
        "summary.t256_sol",
        "summary.t64_fp8_over_bf16_time",
    } <= metrics
    blocked = dsa_bench.blocked_doc("x")
    for m in metrics | set(bench.metrics):
        head, _, rest = m.partition(".")
        assert head in blocked and (not rest or rest in blocked[head]), f"{m} missing from the blocked document"
    assert dsa_bench.SUMMARY_SHAPES == {
        "headline": (1, 32768, 4, 8, "bf16"),
        "t256": (32, 32768, 8, 8, "bf16"),
        "t64_fp8": (8, 32768, 8, 8, "fp8"),
    }
    assert all(s[:4] in dsa_bench.HEADLINE for s in dsa_bench.SUMMARY_SHAPES.values()), "gated shapes run first"
    rows = [
        {"B": B, "L": L, "n": n, "H": H, "kv": kv, "sol": 0.01 * i, "fastest": "ours"}
        for i, ((B, L, n, H), kv) in enumerate(
            (s, kv) for s in reversed(dsa_bench.grid(True)) for kv in ("fp8", "bf16")
        )
    ]
    by = {(r["B"], r["L"], r["n"], r["H"], r["kv"]): r for r in rows}
    by[(1, 32768, 4, 8, "bf16")].update(speedup_vs_sglang_triton=0.88, sol=0.2)
    by[(8, 32768, 8, 8, "fp8")]["fp8_over_bf16_time"] = 1.48
    by[(32, 32768, 8, 8, "bf16")]["sol"] = 0.72
    summ = dsa_bench.summarize(rows)
    assert (summ["headline_speedup_vs_sglang_triton"], summ["headline_sol"]) == (0.88, 0.2)
    assert (summ["t256_sol"], summ["t64_fp8_over_bf16_time"]) == (0.72, 1.48)
    src = (REPO / "kernels" / "verify_tools" / "dsa_bench.py").read_text()
    for key in ("speedup_vs_sglang_triton", '"sol"', "fp8_over_bf16_time", '"sglang_triton": "ran"', '"summary"'):
        assert key in src, f"dsa_bench no longer writes {key}"


def test_every_phase_runs_a_shipped_tool_with_json():
    shipped = shipped_packages()
    for where, module, args in COMMANDS:
        assert module.split(".")[0] in shipped, f"{where}: {module} is not in a package kernels/MANIFEST ships"
        assert module.split(".")[0] != "kernels", f"{where}: no importable package may be named kernels"
        assert "--json" in args, where


@pytest.mark.parametrize("where,module,args", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_tool_parser_accepts_the_phase_command(where, module, args, monkeypatch):
    try:
        mod = importlib.import_module(module if "." in module else f"{module}.__main__")
    except ImportError as exc:
        pytest.skip(f"{module} cannot be imported here: {exc}")
    original = argparse.ArgumentParser.parse_args

    def spy(self, a=None, namespace=None):
        ns = original(self, a, namespace)
        raise Parsed(ns)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", spy)
    try:
        rc = mod.main(list(args))
    except Parsed as parsed:
        assert getattr(parsed.args[0], "json", True) is True, f"{where}: --json not parsed as a flag"
    except SystemExit as exc:  # argparse rejected the argv: the phase spec and the tool disagree
        pytest.fail(f"{where}: `python -m {module} {' '.join(args)}` rejected by the tool's parser (exit {exc.code})")
    else:  # some tools turn a usage error into a JSON document and return 2
        pytest.fail(f"{where}: `python -m {module} {' '.join(args)}` was not accepted by the tool (returned {rc})")

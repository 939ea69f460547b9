"""Contract check between phases/*.yaml and the kernel tools: every step command, rendered for a
host of the example fleet, is accepted by the argument parser of the tool it runs
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
    hosts = list(inv.hosts)[:1]
    plan = build_plan(catalog, list(catalog.phases), inv, hosts, RunState(), "0" * 64, REPO / ".unused-state")
    assert not plan.problems, plan.problems
    out = []
    for ph in plan.phases:
        for s in ph.steps + ph.rollback_steps:
            argv = s.commands[0].argv
            if argv[:1] and argv[0].startswith("<builtin:"):
                continue
            out.append((f"{ph.label}:{s.id}", argv[2], argv[3:]))
    return out


COMMANDS = rendered_commands()


def shipped_packages() -> set[str]:
    """Top-level packages the bundle manifest ships (``<package>/*.py`` lines of kernels/MANIFEST)."""
    lines = (REPO / "kernels" / "MANIFEST").read_text().splitlines()
    return {ln.split("/", 1)[0] for ln in lines if ln.strip() and not ln.startswith("#") and ln.endswith("/*.py")}


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

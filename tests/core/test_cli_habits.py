"""CLI habits: `--version` alone, shell completion, and printed commands that paste as they are."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

import pytest
from core_helpers import REPO, phase, step, tool

from orchestrator import __version__
from orchestrator.invocation import Invocation, parse_argv, paste_command, remember_argv


def cli(*args: str, env: dict[str, str] | None = None, under_bash: bool = False) -> subprocess.CompletedProcess:
    """`python -m orchestrator ARGS`; under_bash: as the child of a bash that stays its parent, as at a prompt."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("ORCHESTRATOR_", "_ORCHESTRATOR"))}
    argv = [sys.executable, "-m", "orchestrator", *args]
    return subprocess.run(
        ["bash", "-c", '"$@"; exit $?', "bash", *argv] if under_bash else argv,
        cwd=REPO,
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_version_alone_exits_0_and_prints_the_version():
    r = cli("--version")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == __version__


def test_help_offers_completion_and_show_completion_prints_a_script():
    r = cli("--help")
    assert r.returncode == 0 and "--install-completion" in r.stdout and "--show-completion" in r.stdout
    # Typer finds the user's shell among the process's ancestors (shellingham); from a runner with no shell above it
    # it prints "Shell  not supported.", so the command runs under bash, as at a prompt.
    r = cli("--show-completion", under_bash=True)
    assert r.returncode == 0, r.stderr
    assert "_ORCHESTRATOR_COMPLETE" in r.stdout and "complete " in r.stdout


def test_completion_completes_commands_and_flags():
    env = {"_ORCHESTRATOR_COMPLETE": "complete_bash", "COMP_WORDS": "orchestrator ro", "COMP_CWORD": "1"}
    r = cli(env=env)
    assert r.returncode == 0 and r.stdout.split() == ["rollback"], (r.stdout, r.stderr)
    env.update(COMP_WORDS="orchestrator run --dry", COMP_CWORD="2")
    assert cli(env=env).stdout.split() == ["--dry-run"]


@pytest.mark.parametrize(
    "argv,expected",
    [
        (["plan", "3", "-i", "f.yaml", "--state-dir", "s"], Invocation(inventory="f.yaml", state_dir="s")),
        (["run", "--inventory=a b.yaml", "--phases-dir=p", "-lgpu-01"], Invocation("a b.yaml", None, "p", "gpu-01")),
        (["run", "--limit", "x", "--limit", "y"], Invocation(limit="y")),
        (["run", "--", "-i", "nope"], Invocation()),
        (["status"], Invocation()),
    ],
)
def test_parse_argv_finds_the_carried_options(argv, expected):
    assert parse_argv(argv) == expected


def test_paste_command_carries_the_accepted_flags_quoted_and_never_twice():
    inv = Invocation(inventory="my fleet.yaml", state_dir="/srv/o", phases_dir="ph", limit="canary,gpu-02")
    assert paste_command("run", "3", "--approve", "ab12", invocation=inv) == (
        "orchestrator run 3 --approve ab12 --inventory 'my fleet.yaml' --state-dir /srv/o "
        "--phases-dir ph --limit canary,gpu-02"
    )
    # status and phases accept fewer options: a pasted command must not exit 2
    assert paste_command("status", invocation=inv) == "orchestrator status --state-dir /srv/o --phases-dir ph"
    assert paste_command("phases", invocation=inv) == "orchestrator phases --phases-dir ph"
    assert paste_command("inventory", "check", invocation=inv) == (
        "orchestrator inventory check --inventory 'my fleet.yaml' --limit canary,gpu-02"
    )
    # an explicit value in the hint wins; skip drops a carried option
    assert paste_command("run", "0", "--limit", "gpu-02", invocation=inv) == (
        "orchestrator run 0 --limit gpu-02 --inventory 'my fleet.yaml' --state-dir /srv/o --phases-dir ph"
    )
    assert "--limit" not in paste_command("rollback", "3", skip={"limit"}, invocation=inv)
    assert paste_command("run", "0", invocation=Invocation()) == "orchestrator run 0"


def test_remember_argv_is_what_paste_command_uses_by_default():
    try:
        remember_argv(["plan", "3", "-i", "inv.yaml"])
        assert paste_command("run", "3") == "orchestrator run 3 --inventory inv.yaml"
    finally:
        remember_argv([])
    assert paste_command("run", "3") == "orchestrator run 3"


def test_plan_hint_pastes_as_is_with_the_users_flags(tmp_path):
    """`plan` with -i/--state-dir/--phases-dir prints `run --approve`; pasting it runs the phase."""
    from core_helpers import Workspace

    w = Workspace(tmp_path)
    w.write_phase(phase(0, "gate", [step("s", tool(), requires_approval=True, changes="touches nothing")]))
    state = tmp_path / "elsewhere state"
    flags = ["-i", str(w.inventory), "--state-dir", str(state), "--phases-dir", str(w.phases)]
    env = {"ORCHESTRATOR_ROOT": str(w.checkout)}
    r = cli("plan", "0", *flags, env=env)
    assert r.returncode == 0, r.stderr
    (line,) = [ln for ln in r.stdout.splitlines() if "To run exactly this plan without a TTY:" in ln]
    pasted = shlex.split(line.split(": ", 1)[1])
    assert pasted[:2] == ["orchestrator", "run"] and "--approve" in pasted
    assert pasted[pasted.index("--state-dir") + 1] == str(state)
    r = cli(*pasted[1:], env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (state / "state.json").exists()
    r = cli("status", "--json", "--state-dir", str(state), "--phases-dir", str(w.phases), env=env)
    assert r.returncode == 0 and '"completed"' in r.stdout


# ------------------------------------------------------------------ status without Typer (fastpath)
def typer_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """The same command through orchestrator.cli.main (Typer), never the fast path."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("ORCHESTRATOR_")}
    return subprocess.run(
        [sys.executable, "-c", "import sys; from orchestrator.cli import main; main(sys.argv[1:])", *args],
        cwd=REPO,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_status_fast_path_prints_exactly_what_the_typer_command_prints(tmp_path):
    from core_helpers import Workspace

    w = Workspace(tmp_path)
    w.hosts(["g1", "g2"])
    w.write_phase(phase(0, "a", [step("s", tool("--metric", "n=7"), metrics=["n"])]))
    env = w.env()
    assert cli("run", "0", env=env).returncode == 0
    cases = [
        ["status"],
        ["status", "--json"],
        ["status", "--debug", f"--state-dir={w.state}", "--phases-dir", str(w.phases)],
        ["status", "--state-dir", str(tmp_path / "empty")],
        ["status", "--phases-dir", str(tmp_path / "missing")],  # exit 3: the Typer CLI reports it
        ["status", "--json", "--phases-dir", str(tmp_path / "missing")],
        ["status", "--help"],
        ["status", "--no-such-flag"],
        ["status", "--state-dir"],
    ]
    seen = set()
    for args in cases:
        fast, slow = cli(*args, env=env), typer_cli(*args, env=env)
        assert (fast.returncode, fast.stdout, fast.stderr) == (slow.returncode, slow.stdout, slow.stderr), args
        seen.add(fast.returncode)
    assert seen == {0, 2, 3}
    assert '"n": 7' in cli("status", "--json", env=env).stdout
    both = {**env, "ORCHESTRATOR_JSON": "1"}
    assert cli("status", env=both).stdout == typer_cli("status", env=both).stdout


def test_status_fast_path_imports_neither_typer_nor_fabric(tmp_path):
    code = (
        "import sys, runpy; sys.argv = ['orchestrator', 'status', '--json'];\n"
        "try:\n    runpy.run_module('orchestrator', run_name='__main__')\n"
        "except SystemExit as e:\n    assert e.code == 0, e.code\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('typer', 'click', 'fabric', 'paramiko', 'rich'))\n"
        "bad += [m for m in ('importlib.metadata',) if m in sys.modules]\n"
        "print(bad, file=sys.stderr)"
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env={**os.environ, "ORCHESTRATOR_STATE_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    assert r.stderr.strip().splitlines()[-1] == "[]"


def test_the_cli_entry_skips_pydantic_plugin_discovery_unless_asked(tmp_path):
    """pydantic's plugin scan (importlib.metadata over every installed distribution) is skipped by
    ``python -m orchestrator``; ORCHESTRATOR_PYDANTIC_PLUGINS=1 or PYDANTIC_DISABLE_PLUGINS keep
    pydantic's own behaviour; any other name of the loader module still resolves."""
    code = (
        "import sys\n"
        "from orchestrator.__main__ import skip_pydantic_plugin_discovery\n"
        "done = skip_pydantic_plugin_discovery()\n"
        "from pydantic import BaseModel\n"
        "class M(BaseModel):\n    x: int\n"
        "import pydantic.plugin._loader as L\n"
        "print(done, type(L).__name__, list(L.get_plugins()), L.PYDANTIC_ENTRY_POINT_GROUP)"
    )
    base = {
        k: v for k, v in os.environ.items() if k not in ("PYDANTIC_DISABLE_PLUGINS", "ORCHESTRATOR_PYDANTIC_PLUGINS")
    }

    def run(**env: str) -> str:
        r = subprocess.run([sys.executable, "-c", code], cwd=REPO, env={**base, **env}, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        return r.stdout.strip()

    assert run() == "True _NoPluginsLoader [] pydantic"
    assert run(ORCHESTRATOR_PYDANTIC_PLUGINS="1") == "False module [] pydantic"
    assert run(PYDANTIC_DISABLE_PLUGINS="__all__") == "False module [] pydantic"

"""The commands the tool prints for the user to paste carry the flags of the current invocation.

A user who ran ``orchestrator plan 3 -i fleet.yaml --state-dir /srv/o`` and is told to run
``orchestrator run 3 --approve 5c1e9a0`` would get exit 3 (wrong inventory) when pasting it.
:func:`paste_command` adds the current invocation's ``-i/--inventory``, ``--state-dir``,
``--phases-dir`` and ``--limit`` (those the printed command accepts), shell-quoted.

The CLI records the invocation once (:func:`remember_argv` in ``orchestrator.cli.main``, or
:func:`remember` with parsed values); the engine and the views only call :func:`paste_command`.
This module imports neither typer nor click.
"""

from __future__ import annotations

import shlex
import threading
from collections.abc import Iterable, Sequence

PROG = "orchestrator"

#: The carried options: field name -> (the spelling printed, every spelling accepted on input).
OPTIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "inventory": ("--inventory", ("--inventory", "-i")),
    "state_dir": ("--state-dir", ("--state-dir",)),
    "phases_dir": ("--phases-dir", ("--phases-dir",)),
    "limit": ("--limit", ("--limit", "-l")),
}

#: Which carried options each command accepts (a command not listed accepts all of them).
ACCEPTS: dict[str, frozenset[str]] = {
    "run": frozenset(OPTIONS),
    "plan": frozenset(OPTIONS),
    "rollback": frozenset(OPTIONS),
    "status": frozenset({"state_dir", "phases_dir"}),
    "phases": frozenset({"phases_dir"}),
    "inventory check": frozenset({"inventory", "limit"}),
}


class Invocation:
    """The carried options of the running command, as the user typed them (None: not given).

    A plain class, not a dataclass: it is created on every start, and ``status`` is meant to be quick."""

    __slots__ = ("inventory", "state_dir", "phases_dir", "limit")

    def __init__(
        self,
        inventory: str | None = None,
        state_dir: str | None = None,
        phases_dir: str | None = None,
        limit: str | None = None,
    ) -> None:
        self.inventory = inventory
        self.state_dir = state_dir
        self.phases_dir = phases_dir
        self.limit = limit

    def value(self, name: str) -> str | None:
        v: str | None = getattr(self, name)
        return v

    def _key(self) -> tuple[str | None, ...]:
        return (self.inventory, self.state_dir, self.phases_dir, self.limit)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Invocation) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        fields = ", ".join(f"{n}={getattr(self, n)!r}" for n in self.__slots__ if getattr(self, n) is not None)
        return f"Invocation({fields})"


_lock = threading.Lock()
_current = Invocation()


def current() -> Invocation:
    """The recorded invocation (empty until the CLI records one)."""
    with _lock:
        return _current


def remember(
    *,
    inventory: object = None,
    state_dir: object = None,
    phases_dir: object = None,
    limit: object = None,
) -> Invocation:
    """Record parsed option values (paths or strings; None = not given) for :func:`paste_command`."""
    global _current
    inv = Invocation(
        inventory=None if inventory is None else str(inventory),
        state_dir=None if state_dir is None else str(state_dir),
        phases_dir=None if phases_dir is None else str(phases_dir),
        limit=None if limit is None else str(limit),
    )
    with _lock:
        _current = inv
    return inv


def parse_argv(argv: Sequence[str]) -> Invocation:
    """The carried options in ``argv`` (``--opt V``, ``--opt=V``, ``-iV``); the last one wins.

    Only the option names are looked at; an argument after ``--`` is not an option."""
    spellings = {s: name for name, (_, all_) in OPTIONS.items() for s in all_}
    found: dict[str, str] = {}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            break
        name = spellings.get(a)
        if name is not None:
            if i + 1 < len(argv):
                found[name] = argv[i + 1]
            i += 2
            continue
        if a.startswith("--") and "=" in a:
            opt, _, v = a.partition("=")
            if opt in spellings:
                found[spellings[opt]] = v
        elif len(a) > 2 and a[0] == "-" and a[1] != "-" and a[:2] in spellings:
            found[spellings[a[:2]]] = a[2:]
        i += 1
    return Invocation(**found)


def remember_argv(argv: Sequence[str]) -> Invocation:
    """Record the carried options found in the command line ``argv`` (without the program name)."""
    inv = parse_argv(argv)
    return remember(inventory=inv.inventory, state_dir=inv.state_dir, phases_dir=inv.phases_dir, limit=inv.limit)


def _command_of(args: Sequence[str]) -> str:
    if len(args) >= 2 and args[0] == "inventory":
        return f"inventory {args[1]}"
    return args[0] if args else ""


def carried_flags(args: Sequence[str], invocation: Invocation | None = None, *, skip: Iterable[str] = ()) -> list[str]:
    """The ``[--opt, value, ...]`` to append to ``args``: recorded, accepted by the command, not
    already in ``args`` and not in ``skip`` (field names, e.g. ``{"limit"}``)."""
    inv = invocation or current()
    accepted = ACCEPTS.get(_command_of(args), frozenset(OPTIONS))
    given = parse_argv(args)
    skipped = set(skip)
    out: list[str] = []
    for name, (flag, _) in OPTIONS.items():
        v = inv.value(name)
        if v is None or name not in accepted or name in skipped or given.value(name) is not None:
            continue
        out += [flag, v]
    return out


def paste_command(*args: str, skip: Iterable[str] = (), invocation: Invocation | None = None) -> str:
    """``orchestrator ARGS...`` plus the current invocation's flags, shell-quoted for pasting.

    >>> paste_command("run", "3", "--approve", "5c1e9a0", invocation=Invocation(inventory="my fleet.yaml"))
    "orchestrator run 3 --approve 5c1e9a0 --inventory 'my fleet.yaml'"
    """
    argv = [str(a) for a in args]
    return shlex.join([PROG, *argv, *carried_flags(argv, invocation, skip=skip)])

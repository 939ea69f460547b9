"""Build the one shell string sent to a remote host from an argument list.

Every element is quoted with :func:`shlex.quote`; environment values too (Fabric's ``env=``
sends values unquoted, so it is never used). The command is wrapped in ``timeout`` on the
host so that a client-side timeout never leaves it running (docs/ssh-traps.md, T5/T8).
"""

from __future__ import annotations

import math
import re
import shlex

_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def remote_argv(
    argv: list[str],
    *,
    env: dict[str, str] | None = None,
    timeout_s: float | None = None,
    kill_after_s: int = 10,
) -> list[str]:
    """``[timeout, -k, K, N, env, K=V, ..., *argv]``: the command as run on the host (unquoted)."""
    if not argv:
        raise ValueError("argv: empty command")
    for a in argv:
        if not isinstance(a, str):
            raise TypeError(f"argv: element {a!r} is not a string")
        if "\x00" in a:
            raise ValueError("argv: NUL byte in argument")
    cmd: list[str] = []
    if timeout_s is not None:
        cmd += ["timeout", "-k", str(int(kill_after_s)), str(max(1, math.ceil(timeout_s)))]
    if env:
        cmd.append("env")
        for k in sorted(env):
            if not _ENV_KEY.match(k):
                raise ValueError(f"env: invalid variable name {k!r}")
            cmd.append(f"{k}={env[k]}")
    cmd += argv
    return cmd


def render_remote_command(
    argv: list[str],
    *,
    cwd: str | None = None,
    env: dict[str, str] | None = None,
    timeout_s: float | None = None,
    kill_after_s: int = 10,
) -> str:
    """Return ``cd CWD && timeout -k K N env K=V ... ARGV...`` with every piece quoted.

    ``timeout_s`` is rounded up to whole seconds; ``cwd`` must be an absolute path (no
    ``~``: quoting would stop its expansion). This is what the dry-run shows; the SSH
    transport runs the same command inside :mod:`orchestrator.transport.framing`'s wrapper.
    """
    check_cwd(cwd)
    line = shlex.join(remote_argv(argv, env=env, timeout_s=timeout_s, kill_after_s=kill_after_s))
    if cwd:
        line = f"cd {shlex.quote(cwd)} && {line}"
    return line


def check_cwd(cwd: str | None) -> None:
    if cwd and not cwd.startswith("/"):
        raise ValueError(f"cwd: {cwd!r} is not an absolute path")

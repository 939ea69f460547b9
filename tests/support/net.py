"""Ports and waiting: a free TCP port, and waiting until a server answers (HTTP health, a banner).

Every wait has a deadline and raises with what it last saw; nothing here waits forever.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from typing import Any


def free_port(address: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``address`` right now (the kernel picks it; it may be taken later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((address, 0))
        return s.getsockname()[1]


def wait_healthy(url: str, timeout_s: float = 30.0, poll_s: float = 0.1) -> Any:
    """Return the JSON body (or None when it is not JSON) of the first ``200`` from ``GET url``.

    Connection errors and non-200 answers are retried until ``timeout_s``; then AssertionError
    names the URL and the last error.
    """
    deadline = time.monotonic() + timeout_s
    last: Exception | str | None = None
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                body = r.read()
                if r.status == 200:
                    try:
                        return json.loads(body)
                    except ValueError:
                        return None
                last = f"HTTP {r.status}"
        except (OSError, urllib.error.URLError) as exc:
            last = exc
        time.sleep(poll_s)
    raise AssertionError(f"{url} not healthy after {timeout_s}s (last: {last})")


def wait_banner(address: str, port: int, prefix: bytes, timeout_s: float = 10.0, poll_s: float = 0.02) -> None:
    """Return once ``address:port`` accepts a connection and its first bytes start with ``prefix``.

    Raises TimeoutError (with the last connection error) after ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((address, port), timeout=1.0) as s:
                if s.recv(64).startswith(prefix):
                    return
        except OSError as exc:
            last = exc
        time.sleep(poll_s)
    raise TimeoutError(f"{address}:{port} gave no {prefix!r} banner within {timeout_s}s ({last})")

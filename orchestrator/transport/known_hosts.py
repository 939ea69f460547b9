"""known_hosts as OpenSSH writes it, read strictly but without tripping over its extensions.

paramiko's own loader raises ``InvalidHostKey`` on a line it does not understand, and it does not
know OpenSSH's markers (``@revoked``, ``@cert-authority``): one such line made every host
unreachable with an internal error (issue 10). This loader reads the file line by line:

- a plain line (``host[,host] keytype base64``, hashed ``|1|`` names included) becomes a host
  key entry exactly as paramiko reads it;
- ``@revoked <patterns> keytype base64``: that key is refused for every host, even where another
  line lists it; the refusal names ``file:line`` (docs/ssh-traps.md, T14);
- ``@cert-authority ...``: host certificates are not verified by this transport, so the line is
  skipped with a warning naming ``file:line`` (T15); a host whose only entry is a CA line is then
  "not in known_hosts" and refused, never accepted;
- a malformed line (too few fields, bad base64, unknown key type or marker) is skipped with a
  warning naming ``file:line`` (T16).

Nothing here adds keys: the client's policy stays "reject unknown hosts" (T2).
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Revoked:
    where: str  # file:line
    key_type: str
    blob: bytes


@dataclass
class KnownHosts:
    """What one known_hosts file yielded."""

    path: str
    entries: list[Any] = field(default_factory=list)  # paramiko.hostkeys.HostKeyEntry
    revoked: list[Revoked] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def revoked_entry(self, key: Any) -> Revoked | None:
        """The ``@revoked`` line that names ``key`` (a paramiko PKey), if any."""
        blob = key.asbytes()
        for r in self.revoked:
            if r.blob == blob:
                return r
        return None

    def install(self, host_keys: Any) -> None:
        """Add the usable entries to a paramiko ``HostKeys`` (revoked keys left out)."""
        for e in self.entries:
            if self.revoked_entry(e.key) is None:
                host_keys._entries.append(e)


def load(path: str) -> KnownHosts:
    """Read ``path`` (OSError when it cannot be read)."""
    from paramiko.hostkeys import HostKeyEntry, InvalidHostKey

    out = KnownHosts(path=path)
    with open(path, encoding="utf-8", errors="replace") as fh:
        lines = fh.read().splitlines()
    for lineno, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{path}:{lineno}"
        if line.startswith("@"):
            marker, _, rest = line.partition(" ")
            fields = rest.split()
            if marker == "@cert-authority":
                out.warnings.append(
                    f"{where}: @cert-authority line skipped: host certificates are not verified by the "
                    "orchestrator; list the hosts' own keys for the hosts it signs"
                )
                continue
            if marker == "@revoked":
                if len(fields) < 3:
                    out.warnings.append(f"{where}: malformed @revoked line skipped (expected patterns keytype key)")
                    continue
                try:
                    blob = base64.b64decode(fields[2], validate=True)
                except (binascii.Error, ValueError):
                    out.warnings.append(f"{where}: malformed @revoked line skipped (the key is not base64)")
                    continue
                out.revoked.append(Revoked(where=where, key_type=fields[1], blob=blob))
                continue
            out.warnings.append(f"{where}: unknown marker {marker!r}; line skipped")
            continue
        try:
            entry = HostKeyEntry.from_line(line, lineno)
        except (InvalidHostKey, ValueError, TypeError, binascii.Error) as exc:
            out.warnings.append(f"{where}: malformed line skipped ({type(exc).__name__})")
            continue
        except Exception as exc:  # noqa: BLE001 - paramiko raises assorted errors for odd keys
            out.warnings.append(f"{where}: malformed line skipped ({type(exc).__name__})")
            continue
        if entry is None:
            out.warnings.append(f"{where}: malformed line skipped (expected: host[,host] keytype base64-key)")
            continue
        out.entries.append(entry)
    return out

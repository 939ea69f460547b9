"""The one bundle of a command and its shipment to hosts (plans/0001 section 9).

``kernels/`` is packed once per command (:meth:`BundleShipper.packed`); its sha256 is used for
the digest, the approval summary, state and the hosts, and the same bytes are written to
``<state_dir>/bundles/<sha>.tar.gz`` the first time a host needs them. Before each step on a
host that gets the bundle (ssh hosts; local hosts in a phase that changes a service),
:meth:`BundleShipper.check` places or re-checks it there:

- the first step of each phase: ``ship_bundle`` (one host-side check; upload only when the host
  has no tarball with this sha256; re-unpack a missing or damaged tree, recorded as
  ``repaired`` with a warning; ends with a check that must say ``ok``);
- every later step of that phase: ``verify_on_host`` (one round trip); anything but ``ok``
  fails the host naming the verdict. A rollback step instead repairs the tree (recorded) so
  that it can still run from the approved bytes.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass
from pathlib import Path

from orchestrator import bundle as bundle_mod
from orchestrator.errors import OrchestratorError, StateConflict
from orchestrator.inventory import Host
from orchestrator.invocation import paste_command
from orchestrator.transport.base import Transport

RERUN_HINT = "run the command again: it packs kernels/ anew and shows a new plan and digest"


@dataclass
class BundleCheck:
    """What :meth:`BundleShipper.check` did on one host before one step (recorded in state)."""

    sha256: str
    remote_dir: str
    first: bool  # the first use in this phase: a full ship_bundle
    verdict: str | None = None  # the one-round-trip check before a later step
    shipped: bundle_mod.BundleOnHost | None = None  # ship_bundle's result (first use, or a repair)
    error: OrchestratorError | None = None  # raised by the caller once this check is recorded
    call_failed: bool = False  # the error came from a host call (not from a verdict other than ok)
    warning: str | None = None  # a damaged copy was repaired


def ships_bundle(host: Host | None, needs_approval: bool) -> bool:
    """Whether ``host`` gets the bundle placed (and hash-checked) under its remote_root in a phase."""
    return host is not None and (not host.is_local or needs_approval)


class BundleShipper:
    """Packs ``<root>/kernels`` once and ships exactly those bytes; thread-safe."""

    def __init__(self, root: Path, state_dir: Path) -> None:
        self.root = root
        self.state_dir = state_dir
        self._mu = threading.Lock()
        self._packed: tuple[str, bytes, int] | None = None  # (sha256, tar.gz bytes, files)
        self._bundle: bundle_mod.Bundle | None = None
        self._shipped: set[tuple[str, int]] = set()  # (host, phase id) shipped in this command

    def packed(self) -> tuple[str, bytes, int]:
        with self._mu:
            if self._packed is None:
                data, files = bundle_mod.pack_bytes(self.root)
                self._packed = (hashlib.sha256(data).hexdigest(), data, files)
            return self._packed

    @property
    def sha(self) -> str:
        """sha256 of this command's bundle (computed once; planning writes nothing)."""
        return self.packed()[0]

    def bundle(self) -> bundle_mod.Bundle:
        """The bundle file that is shipped, written once (atomically) to ``<state_dir>/bundles/``
        and re-hashed before every shipment; a different hash raises StateConflict (exit 6)."""
        sha, data, files = self.packed()
        with self._mu:
            if self._bundle is None:
                self._bundle = bundle_mod.write_bundle(data, files, self.state_dir / "bundles")
            b = self._bundle
        try:
            got = bundle_mod.file_sha256(b.path)
        except OSError as exc:
            got = f"unreadable ({exc.strerror})"
        if b.sha256 != sha or got != sha:
            raise StateConflict(
                f"bundle changed during this run: the planned and approved bundle is {sha} but "
                f"{b.path} now hashes to {got if b.sha256 == sha else b.sha256}; nothing more is shipped",
                hint=RERUN_HINT,
            )
        return b

    def check_source_unchanged(self, when: str) -> None:
        """StateConflict (exit 6, naming both hashes) when ``kernels/`` no longer packs to this
        command's bundle: local hosts run in the checkout, and a run must not go on with code
        other than the bundle it planned and had approved."""
        sha = self.sha
        now = bundle_mod.bundle_sha(self.root)
        if now != sha:
            raise StateConflict(
                f"kernels/ under {self.root} changed during this run ({when}): the planned and approved "
                f"bundle is {sha} but kernels/ now packs to {now}; nothing more is run",
                hint=RERUN_HINT,
            )

    def check(
        self, transport: Transport, host: Host, phase_id: int, phase_label: str, step_id: str, *, rollback: bool
    ) -> BundleCheck:
        """Place (first use in the phase) or re-check the bundle on ``host`` before ``step_id``.
        Bundle problems come back in ``error``; StateConflict (the local file changed) is raised."""
        b = self.bundle()
        remote_dir = bundle_mod.remote_bundle_paths(host.remote_root, b.sha256)[0]
        key = (host.name, phase_id)
        with self._mu:
            first = key not in self._shipped
        out = BundleCheck(sha256=b.sha256, remote_dir=remote_dir, first=first)
        try:
            if first:
                out.shipped = bundle_mod.ship_bundle(transport, b, host)
                with self._mu:
                    self._shipped.add(key)
            else:
                out.verdict = bundle_mod.verify_on_host(transport, b, host)
                if out.verdict != "ok" and rollback:
                    out.shipped = bundle_mod.ship_bundle(transport, b, host)
                elif out.verdict != "ok":
                    out.error = bundle_mod.BundleError(
                        f"{host.name}: bundle {b.short} failed its hash check on the host before step {step_id} "
                        f"of phase {phase_label} ({out.verdict}): {remote_dir} no longer matches the manifest "
                        "written when it was unpacked (a file was edited, removed or replaced on the host); not "
                        f"repaired mid-phase: `{paste_command('run', str(phase_id))}` re-checks it and re-unpacks it from "
                        "the verified tarball",
                        host=host.name,
                        phase=phase_label,
                    )
        except StateConflict:
            raise
        except OrchestratorError as exc:
            out.error, out.call_failed = exc, True
        shipped = out.shipped
        if shipped is not None and shipped.found not in ("ok", "absent"):
            out.warning = (
                f"{host.name}: bundle {b.short} failed its hash check on the host before phase "
                f"{phase_label} ({shipped.found}); "
                + ("re-uploaded and " if shipped.uploaded else "")
                + f"re-unpacked from the verified tarball (the damaged tree is kept as {b.sha256}.damaged.<pid>)"
            )
        return out

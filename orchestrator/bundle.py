"""The kernel bundle: what ``kernels/MANIFEST`` lists, packed deterministically, named by its sha256.

The bundle is exactly what runs on a host: the files under ``kernels/`` that match a pattern
of ``kernels/MANIFEST`` (code, CUDA sources, phase tools, plugin, cut-over agent), stored
relative to ``kernels/`` so the unpacked ``bundles/<sha>/`` is the import root of the tools
(``cd bundles/<sha> && python -m verify_tools.parity``). Docs, notebooks, results, plots and
device scripts are outside it (``docs/``, ``tests/device/``) and never change the sha.

The tarball has sorted entries, mtime 0, uid/gid 0, fixed modes and no compiled or cache
files, so the same sources always give the same hash. That hash is what approval digests,
remote bundle directories (``<remote_root>/bundles/<sha>/``) and ``current`` refer to.

On a host (any :class:`~orchestrator.transport.base.Transport`), :func:`ship_bundle` keeps
``bundles/<sha>.tar.gz`` (uploaded only when the host has no copy whose sha256 matches) and
``bundles/<sha>/`` (unpacked, with ``.sha256`` and a ``.manifest`` of every file's sha256),
and re-checks both on the host each time it is called; :func:`verify_on_host` is that check
alone. Damaged trees are moved aside as ``<sha>.damaged.<pid>``, never deleted. The
``current`` / ``previous`` pointers belong to the host-side cut-over agent
(``kernels/cutover_agent``, verb ``switch``), not to the controller.

:mod:`orchestrator.shipping` packs once per command (:func:`pack_bytes`), writes those bytes
with :func:`write_bundle`, re-hashes the file (:func:`file_sha256`) before shipping, and calls
:func:`ship_bundle` before a host's first step of each phase and :func:`verify_on_host` before
every later step (plans/0001 section 9).
"""

from __future__ import annotations

import fnmatch
import gzip
import hashlib
import io
import logging
import os
import re
import tarfile
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from orchestrator.atomic import atomic_write_bytes
from orchestrator.errors import HostUnreachable, StepFailed
from orchestrator.transport.base import CommandResult, Transport

#: The folder of the checkout that holds the bundle's sources and its manifest.
BUNDLE_DIR = "kernels"
MANIFEST_NAME = "MANIFEST"
#: Names never packed even when a pattern matches (build outputs, caches, editor files).
EXCLUDED_DIRS = {"__pycache__", ".pytest_cache", "build", ".hypothesis", ".mypy_cache"}
EXCLUDED_SUFFIXES = (".pyc", ".pyo", ".so", ".o", ".swp", ".tmp")


class Bundle(BaseModel):
    """A packed bundle on local disk. ``sha256`` is the hash of the tarball's bytes."""

    sha256: str
    path: Path
    files: int
    size_bytes: int

    @property
    def short(self) -> str:
        return self.sha256[:12]


def manifest_patterns(source_root: Path) -> list[str]:
    """The glob patterns of ``<source_root>/kernels/MANIFEST`` (one a line, ``#`` comments;
    ``*`` also matches ``/``), plus the manifest itself. A missing manifest is a
    :class:`BundleError`: without it nothing says what runs on a host."""
    path = source_root / BUNDLE_DIR / MANIFEST_NAME
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise BundleError(f"{path}: cannot read the bundle manifest ({exc.strerror or exc})") from None
    patterns = [MANIFEST_NAME]
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            patterns.append(line)
    return patterns


def bundle_members(source_root: Path) -> list[Path]:
    """Files of the bundle, relative to ``<source_root>/kernels``, sorted by posix path."""
    base = source_root / BUNDLE_DIR
    patterns = manifest_patterns(source_root)
    out: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if d not in EXCLUDED_DIRS and not d.startswith("."))
        for f in sorted(filenames):
            if f.endswith(EXCLUDED_SUFFIXES):
                continue
            rel = Path(dirpath, f).relative_to(base)
            if any(fnmatch.fnmatchcase(rel.as_posix(), pat) for pat in patterns):
                out.append(rel)
    return sorted(out, key=lambda p: p.as_posix())


def pack_bytes(source_root: Path) -> tuple[bytes, int]:
    """Return the deterministic ``.tar.gz`` bytes of the bundle under ``source_root`` and its
    file count (entries relative to ``kernels/``; mtime 0, uid/gid 0, modes 0644/0755)."""
    raw = io.BytesIO()
    base = source_root / BUNDLE_DIR
    files = bundle_members(source_root)
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel in files:
            data = (base / rel).read_bytes()
            info = tarfile.TarInfo(rel.as_posix())
            info.size = len(data)
            info.mtime = 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mode = 0o755 if os.access(base / rel, os.X_OK) else 0o644
            tar.addfile(info, io.BytesIO(data))
    gz = io.BytesIO()
    with gzip.GzipFile(fileobj=gz, mode="wb", mtime=0, compresslevel=6) as z:
        z.write(raw.getvalue())
    return gz.getvalue(), len(files)


def write_bundle(data: bytes, files: int, out_dir: Path) -> Bundle:
    """Write packed bytes (from :func:`pack_bytes`) to ``out_dir/<sha>.tar.gz`` atomically
    (temp file, fsync, rename) unless a file with exactly these bytes is already there."""
    sha = hashlib.sha256(data).hexdigest()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{sha}.tar.gz"
    if not (path.is_file() and file_sha256(path) == sha):
        atomic_write_bytes(path, data)
    return Bundle(sha256=sha, path=path, files=files, size_bytes=len(data))


def build_bundle(source_root: Path, out_dir: Path) -> Bundle:
    """Pack the bundle of ``source_root`` into ``out_dir/<sha>.tar.gz`` (atomic write) and describe it."""
    data, count = pack_bytes(source_root)
    return write_bundle(data, count, out_dir)


def file_sha256(path: Path) -> str:
    """sha256 of a file's bytes (the local tarball, re-checked before it is shipped)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def bundle_sha(source_root: Path) -> str:
    """The sha256 that :func:`build_bundle` would give, without writing anything."""
    data, _ = pack_bytes(source_root)
    return hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------------------------------
# Shipping the bundle to a host (plans/0001 section 4).
#
# Every remote step below is a constant ``sh -c`` script; the values (paths, sha) travel as
# positional arguments, quoted by the transport, so no inventory value is ever parsed as shell.

_log = logging.getLogger(__name__)
_SHA = re.compile(r"^[0-9a-f]{64}$")
#: Seconds allowed for one bundle check / unpack on the host.
BUNDLE_STEP_TIMEOUT_S = 120

#: Prints one word: ok | absent | tarball-mismatch <got> | unpacked-missing | unpacked-mismatch.
_CHECK_SH = r"""
tar=$1 dir=$2 sha=$3
[ -f "$tar" ] || { echo absent; exit 0; }
got=$(sha256sum < "$tar") || { echo "sha256sum failed" >&2; exit 3; }
got=${got%% *}
[ "$got" = "$sha" ] || { echo "tarball-mismatch $got"; exit 0; }
{ [ -f "$dir/.sha256" ] && [ "$(cat -- "$dir/.sha256")" = "$sha" ]; } || { echo unpacked-missing; exit 0; }
(cd -- "$dir" && sha256sum --quiet --strict -c .manifest >/dev/null 2>&1) || { echo unpacked-mismatch; exit 0; }
echo ok
"""

#: Verifies the tarball, unpacks it next to its final place, writes ``.manifest`` (sha256 of
#: every unpacked file) and ``.sha256``, then renames it into place (a damaged old copy is
#: moved aside, not deleted: a service may still run from it). :func:`unpack_argv` appends
#: the check script, so the same round trip ends by printing the check's verdict.
_UNPACK_SH = r"""
set -eu
tar=$1 dir=$2 sha=$3
got=$(sha256sum < "$tar"); got=${got%% *}
[ "$got" = "$sha" ] || { echo "tarball hash on host is $got, expected $sha" >&2; exit 11; }
tmp="$dir.unpack.$$"
trap 'rm -rf -- "$tmp"' EXIT  # a failed or killed unpack leaves nothing half-written behind
rm -rf -- "$tmp"
mkdir -p -- "$tmp"
tar -xzf "$tar" -C "$tmp" --no-same-owner
(cd -- "$tmp" && find . -type f ! -path ./.manifest -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum -- > .manifest)
printf '%s\n' "$sha" > "$tmp/.sha256"
if [ -e "$dir" ]; then mv -T -- "$dir" "$dir.damaged.$$"; fi
mv -T -- "$tmp" "$dir"
"""


def _sh(script: str, *args: str) -> list[str]:
    return ["sh", "-c", script, "sh", *args]


class BundleError(StepFailed):
    """The bundle could not be placed or verified on a host (exit 1, names the host)."""

    code = "BUNDLE"


class BundleOnHost(BaseModel):
    """Where a bundle lives on a host and what :func:`ship_bundle` had to do to put it there."""

    host: str
    sha256: str
    remote_dir: str
    tarball: str
    uploaded: bool  # False: already present and its hash verified on the host
    unpacked: bool
    found: str  # what the first check saw: ok, absent, tarball-mismatch, unpacked-missing, ...
    verified: bool  # the final check on the host said ok
    duration_s: float


def remote_bundle_paths(remote_root: str, sha: str) -> tuple[str, str]:
    """``(<remote_root>/bundles/<sha>, <remote_root>/bundles/<sha>.tar.gz)``."""
    if not remote_root.startswith("/"):
        raise ValueError(f"remote_root: {remote_root!r} is not an absolute path")
    if not _SHA.match(sha):
        raise ValueError(f"sha256: {sha!r} is not a sha256 hex digest")
    base = remote_root.rstrip("/") or "/"
    d = f"{base.rstrip('/')}/bundles/{sha}"
    return d, d + ".tar.gz"


def check_argv(remote_root: str, sha: str) -> list[str]:
    """The host-side check: tarball sha256, ``.sha256`` marker and every unpacked file."""
    d, tar = remote_bundle_paths(remote_root, sha)
    return _sh(_CHECK_SH, tar, d, sha)


def unpack_argv(remote_root: str, sha: str) -> list[str]:
    d, tar = remote_bundle_paths(remote_root, sha)
    return _sh(_UNPACK_SH + _CHECK_SH, tar, d, sha)


def _remote_root(host: Any) -> str:
    root = getattr(host, "remote_root", None)
    if not root:
        raise BundleError(f"{host.name}: remote_root is not set", host=host.name)
    return str(root)


def _run(transport: Transport, host: Any, argv: list[str], what: str) -> CommandResult:
    r = transport.run(argv, timeout_s=BUNDLE_STEP_TIMEOUT_S)
    if r.lost or r.timed_out:
        raise HostUnreachable(
            f"{host.name}: host {'lost' if r.lost else 'timed out'} during bundle {what}", host=host.name
        )
    if r.exit_code != 0:
        raise BundleError(f"{host.name}: bundle {what} failed (exit {r.exit_code}): {r.stderr_tail(3)}", host=host.name)
    return r


def verify_on_host(transport: Transport, bundle: Bundle, host: Any) -> str:
    """Check the bundle on the host; return ``ok`` or what is wrong (absent, *-mismatch, ...)."""
    r = _run(transport, host, check_argv(_remote_root(host), bundle.sha256), "hash check")
    return r.stdout.strip() or "no answer"


def ship_bundle(transport: Transport, bundle: Bundle, host: Any) -> BundleOnHost:
    """Make ``<remote_root>/bundles/<sha>/`` hold exactly this bundle, verified on the host.

    Uploads the tarball only when the host has no copy whose sha256 matches; unpacks when
    the unpacked tree is missing or differs from its manifest; always ends with a check on
    the host, so the returned directory has been hash-verified right before this use.
    """
    started = time.monotonic()
    root = _remote_root(host)
    remote_dir, tarball = remote_bundle_paths(root, bundle.sha256)
    found = verify_on_host(transport, bundle, host)
    uploaded = unpacked = False
    if found != "ok":
        if found == "absent" or found.startswith("tarball-mismatch"):
            transport.put(Path(bundle.path), tarball)
            uploaded = True
        r = _run(transport, host, unpack_argv(root, bundle.sha256), "unpack")
        unpacked = True
        final = (r.stdout.strip().splitlines() or ["no answer"])[-1]  # the appended check's verdict
        if final != "ok":
            raise BundleError(
                f"{host.name}: bundle {bundle.short} does not verify on the host after upload ({final})", host=host.name
            )
    _log.info(
        "bundle %s on %s: %s",
        bundle.short,
        host.name,
        "uploaded" if uploaded else "re-unpacked" if unpacked else "present, hash verified",
    )
    return BundleOnHost(
        host=host.name,
        sha256=bundle.sha256,
        remote_dir=remote_dir,
        tarball=tarball,
        uploaded=uploaded,
        unpacked=unpacked,
        found=found,
        verified=True,
        duration_s=round(time.monotonic() - started, 3),
    )

"""The kernel bundle: ``kernels/`` packed deterministically, identified by its sha256.

The tarball has sorted entries, mtime 0, uid/gid 0, fixed modes and no compiled or cache
files, so the same sources always give the same hash. That hash is what approval digests,
remote bundle directories (``<remote_root>/bundles/<sha>/``) and ``current`` refer to.
"""
from __future__ import annotations

import gzip
import hashlib
import io
import os
import tarfile
from pathlib import Path

from pydantic import BaseModel

#: Names never packed (build outputs, caches, editor files).
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


def _members(source_root: Path, package: str) -> list[Path]:
    out: list[Path] = []
    base = source_root / package
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if d not in EXCLUDED_DIRS and not d.startswith("."))
        for f in sorted(filenames):
            if f.endswith(EXCLUDED_SUFFIXES) or f.startswith("."):
                continue
            out.append(Path(dirpath, f).relative_to(source_root))
    return sorted(out, key=lambda p: p.as_posix())


def pack_bytes(source_root: Path, package: str = "kernels") -> tuple[bytes, int]:
    """Return the deterministic ``.tar.gz`` bytes of ``source_root/package`` and its file count."""
    raw = io.BytesIO()
    files = _members(source_root, package)
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel in files:
            data = (source_root / rel).read_bytes()
            info = tarfile.TarInfo(rel.as_posix())
            info.size = len(data)
            info.mtime = 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mode = 0o755 if os.access(source_root / rel, os.X_OK) else 0o644
            tar.addfile(info, io.BytesIO(data))
    gz = io.BytesIO()
    with gzip.GzipFile(fileobj=gz, mode="wb", mtime=0, compresslevel=6) as z:
        z.write(raw.getvalue())
    return gz.getvalue(), len(files)


def build_bundle(source_root: Path, out_dir: Path, package: str = "kernels") -> Bundle:
    """Pack ``source_root/package`` into ``out_dir/<sha>.tar.gz`` (atomic write) and describe it."""
    data, count = pack_bytes(source_root, package)
    sha = hashlib.sha256(data).hexdigest()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{sha}.tar.gz"
    if not path.exists():
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    return Bundle(sha256=sha, path=path, files=count, size_bytes=len(data))


def bundle_sha(source_root: Path, package: str = "kernels") -> str:
    """The sha256 that :func:`build_bundle` would give, without writing anything."""
    data, _ = pack_bytes(source_root, package)
    return hashlib.sha256(data).hexdigest()

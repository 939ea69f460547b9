"""Disk full during an upload: a per-host step failure that says "no space left on <host>:<path>"
(exit 1, not unreachable), no partial file left, and partial files of earlier runs removed (issue 10).

The host's filesystem is a 512 KiB tmpfs mounted for the test (needs root; skipped with the reason
otherwise)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from faultkit import host

from orchestrator.bundle import ship_bundle
from orchestrator.errors import HostUnreachable, StepFailed
from orchestrator.transport.ssh import SSHTransport

pytestmark = pytest.mark.ssh


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "small"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a size-limited tmpfs needs root")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _parts(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir() if ".part-" in p.name) if d.exists() else []


def test_disk_full_is_a_step_failure_naming_host_and_path_and_leaves_no_partial_file(
    fault_lab, tmp_path, closing, small_fs
):
    lab = fault_lab(1)
    big = tmp_path / "big.tar.gz"
    big.write_bytes(os.urandom(2 * 1024 * 1024))
    dest = small_fs / "bundles"
    t = closing(SSHTransport(host(lab, "h1", small_fs)))
    with pytest.raises(StepFailed) as err:
        t.put(big, str(dest / big.name))
    assert not isinstance(err.value, HostUnreachable)
    assert err.value.exit_code == 1 and err.value.host == "h1"
    assert str(err.value).startswith(f"no space left on h1:{dest} (upload of big.tar.gz, {2 * 1024 * 1024} bytes")
    # host side: nothing partial is left, the space is free again, the connection still works
    assert _parts(dest) == [] and not (dest / big.name).exists()
    st = os.statvfs(small_fs)
    assert st.f_bavail * st.f_frsize > 400 * 1024
    assert t.run(["true"], timeout_s=5).ok


def test_partial_uploads_left_by_an_earlier_run_are_removed_by_the_next(fault_lab, tmp_path, closing, small_fs):
    lab = fault_lab(1)
    dest = small_fs / "bundles"
    dest.mkdir()
    (dest / ".b.tar.gz.part-0123456789ab").write_bytes(b"x" * 300 * 1024)  # a killed run's leftover
    (dest / ".other.part-0123456789ab").write_bytes(b"y")  # another file's: not ours to remove
    small = tmp_path / "b.tar.gz"
    small.write_bytes(os.urandom(200 * 1024))  # fits only once the leftover is gone
    t = closing(SSHTransport(host(lab, "h1", small_fs)))
    res = t.put(small, str(dest / "b.tar.gz"))
    assert res.bytes == 200 * 1024 and (dest / "b.tar.gz").read_bytes() == small.read_bytes()
    assert _parts(dest) == [".other.part-0123456789ab"]


def test_ship_bundle_on_a_full_disk_fails_the_host_with_the_cause(fault_lab, tmp_path, closing, small_fs):
    from labkit_bundle import big_bundle

    lab = fault_lab(1)
    bundle = big_bundle(tmp_path, 2 * 1024 * 1024)
    h = host(lab, "h1", small_fs / "root")
    t = closing(SSHTransport(h))
    with pytest.raises(StepFailed) as err:
        ship_bundle(t, bundle, h)
    assert err.value.exit_code == 1 and not isinstance(err.value, HostUnreachable), err.value
    assert f"no space left on h1:{small_fs / 'root' / 'bundles'}" in str(err.value)
    assert _parts(small_fs / "root" / "bundles") == []


def test_a_full_disk_on_one_host_fails_that_host_with_exit_1_and_the_others_complete(fault_lab, tmp_path, small_fs):
    from faultkit import Project, phase_doc

    from tests.support.sshd_lab import inventory_doc, write_inventory

    lab = fault_lab(2)
    proj = Project(tmp_path / "p", phase_doc())
    (proj.root / "kernels" / "blob.py").write_text("# " + os.urandom(1 << 20).hex() + "\n")  # ~1 MB gzipped
    doc = inventory_doc(lab, tmp_path / "remote")
    doc["hosts"][0]["remote_root"] = str(small_fs / "root")  # h1: 512 KiB
    inv = write_inventory(tmp_path / "inv.yaml", doc)
    code, out = proj.cli("run", "0", "--inventory", str(inv), "--json", "--yes")
    assert code == 1, out  # a step failed; not 4 (unreachable)
    step = proj.state_doc()["phases"]["0"]["steps"][0]["hosts"]
    assert step["h2"]["status"] == "completed"
    assert step["h1"]["status"] == "failed"
    assert f"no space left on h1:{small_fs / 'root' / 'bundles'}" in step["h1"]["reason"], step["h1"]
    assert not step["h1"]["reason"].startswith("unreachable")
    assert _parts(small_fs / "root" / "bundles") == []

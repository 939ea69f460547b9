"""Shipping the bundle over SSH: upload once, verify on the host before every use, repair."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from labkit import make_host

from orchestrator.bundle import (
    BundleError,
    check_argv,
    remote_bundle_paths,
    ship_bundle,
    verify_on_host,
)
from tests.support.bundles import make_bundle

pytestmark = pytest.mark.ssh


@pytest.fixture
def bundle(tmp_path):
    return make_bundle(tmp_path, "v1")


def test_first_use_uploads_unpacks_and_verifies(shared_lab, tmp_path, transports, bundle):
    host = make_host(shared_lab, "h1", tmp_path)
    shipped = ship_bundle(transports(host), bundle, host)
    d = Path(host.remote_root, "bundles", bundle.sha256)
    assert (shipped.uploaded, shipped.unpacked, shipped.found, shipped.verified) == (True, True, "absent", True)
    assert shipped.remote_dir == str(d)
    assert (d / ".sha256").read_text() == bundle.sha256 + "\n"
    assert (d / "csrc" / "k.cu").read_text().startswith("// kernel v1")
    assert Path(shipped.tarball).read_bytes() == bundle.path.read_bytes()
    manifest = (d / ".manifest").read_text().splitlines()
    assert len(manifest) == bundle.files


def test_second_use_skips_the_upload_and_still_checks_the_hash(shared_lab, tmp_path, transports, bundle):
    host = make_host(shared_lab, "h2", tmp_path)
    t = transports(host)
    first = ship_bundle(t, bundle, host)
    inode = os.stat(first.tarball).st_ino
    again = ship_bundle(t, bundle, host)
    assert (again.uploaded, again.unpacked, again.found) == (False, False, "ok")
    assert os.stat(again.tarball).st_ino == inode  # the tarball was not rewritten
    assert ship_bundle(t, bundle, host).remote_dir == first.remote_dir


def test_a_modified_unpacked_file_is_detected_and_repaired_from_the_tarball(shared_lab, tmp_path, transports, bundle):
    host = make_host(shared_lab, "h1", tmp_path)
    t = transports(host)
    d = Path(ship_bundle(t, bundle, host).remote_dir)
    (d / "hello.py").write_text("print('tampered')\n")
    assert verify_on_host(t, bundle, host) == "unpacked-mismatch"
    repaired = ship_bundle(t, bundle, host)
    assert (repaired.found, repaired.uploaded, repaired.unpacked) == ("unpacked-mismatch", False, True)
    assert "tampered" not in (d / "hello.py").read_text()
    assert verify_on_host(t, bundle, host) == "ok"


def test_files_added_by_a_build_do_not_invalidate_the_bundle(shared_lab, tmp_path, transports, bundle):
    host = make_host(shared_lab, "h1", tmp_path)
    t = transports(host)
    d = Path(ship_bundle(t, bundle, host).remote_dir)
    (d / "__pycache__").mkdir()
    (d / "__pycache__" / "x.pyc").write_bytes(b"\x00")
    assert verify_on_host(t, bundle, host) == "ok"


def test_a_corrupt_tarball_on_the_host_is_uploaded_again(shared_lab, tmp_path, transports, bundle):
    host = make_host(shared_lab, "h3", tmp_path)
    t = transports(host)
    first = ship_bundle(t, bundle, host)
    Path(first.tarball).write_bytes(b"garbage")
    assert verify_on_host(t, bundle, host).startswith("tarball-mismatch ")
    again = ship_bundle(t, bundle, host)
    assert (again.uploaded, again.verified) == (True, True)
    assert Path(again.tarball).read_bytes() == bundle.path.read_bytes()


def test_a_local_bundle_that_does_not_match_its_sha_is_refused_on_the_host(shared_lab, tmp_path, transports, bundle):
    host = make_host(shared_lab, "h2", tmp_path)
    forged = bundle.model_copy(update={"sha256": "0" * 64})
    with pytest.raises(BundleError, match=r"h2: bundle unpack failed \(exit 11\): tarball hash on host is"):
        ship_bundle(transports(host), forged, host)
    assert not Path(host.remote_root, "bundles", "0" * 64).exists()


def test_hostile_remote_root_is_used_literally(shared_lab, tmp_path, transports, bundle):
    root = tmp_path / "odd root; $(touch canary) `touch canary` 'q'"
    host = make_host(shared_lab, "h1", tmp_path, remote_root=str(root))
    d = ship_bundle(transports(host), bundle, host).remote_dir
    assert Path(d, ".sha256").is_file() and d.startswith(str(root))
    assert not any(tmp_path.rglob("canary")) and not Path("/root/canary").exists()


def test_bad_paths_and_shas_are_rejected_before_anything_is_sent():
    with pytest.raises(ValueError, match="remote_root: 'relative/dir' is not an absolute path"):
        remote_bundle_paths("relative/dir", "a" * 64)
    with pytest.raises(ValueError, match="not a sha256 hex digest"):
        check_argv("/srv/x", "../../etc")

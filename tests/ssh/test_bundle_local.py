"""ship_bundle through the local transport (no sshd needed): the same host-side scripts
place and verify the bundle for ``connection: local`` hosts in cut-over phases."""

from __future__ import annotations

import types
from pathlib import Path

import pytest

from orchestrator.bundle import ship_bundle, verify_on_host
from orchestrator.transport.local import LocalTransport
from tests.support.bundles import make_bundle


@pytest.fixture
def host(tmp_path):
    return types.SimpleNamespace(name="local", remote_root=str(tmp_path / "root"))


def test_local_ship_and_verify(tmp_path, host):
    bundle = make_bundle(tmp_path, "v1")
    t = LocalTransport("local")
    first = ship_bundle(t, bundle, host)
    assert (first.uploaded, first.unpacked, first.verified) == (True, True, True)
    again = ship_bundle(t, bundle, host)
    assert (again.uploaded, again.unpacked, again.found) == (False, False, "ok")
    Path(first.remote_dir, "hello.py").write_text("changed\n")
    assert verify_on_host(t, bundle, host) == "unpacked-mismatch"


def test_a_failed_unpack_leaves_no_temporary_tree(tmp_path, host):
    import hashlib

    from orchestrator.bundle import Bundle, BundleError

    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"not a gzip stream")
    bad = Bundle(sha256=hashlib.sha256(junk.read_bytes()).hexdigest(), path=junk, files=1, size_bytes=17)
    with pytest.raises(BundleError, match="local: bundle unpack failed"):
        ship_bundle(LocalTransport("local"), bad, host)
    bundles = Path(host.remote_root, "bundles")
    assert sorted(p.name for p in bundles.iterdir()) == [f"{bad.sha256}.tar.gz"], "no .unpack.* tree left"

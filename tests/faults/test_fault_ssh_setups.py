"""SSH as users have it: ssh_config aliases, ProxyJump through a strictly checked bastion, agent keys,
encrypted keys, and known_hosts files with OpenSSH's markers and broken lines (issue 10)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from faultkit import host, wait_for

from orchestrator.errors import HostUnreachable
from orchestrator.transport.ssh import SSHTransport
from tests.support.sshd_lab import descendants, keygen, known_hosts_line

pytestmark = pytest.mark.ssh


def _where(t: SSHTransport) -> list[str]:
    r = t.run(["sh", "-c", 'echo "$SSH_CONNECTION"'], timeout_s=10)
    assert r.ok, r
    return r.stdout.split()[2:]


# ------------------------------------------------------------------ known_hosts


def test_a_revoked_host_key_is_refused_naming_file_and_line(fault_lab, tmp_path, closing):
    lab = fault_lab(1)
    h1 = lab.host("h1")
    kh = tmp_path / "known_hosts"
    kh.write_text(
        "# fleet keys\n"
        + known_hosts_line(h1.address, h1.port, h1.host_pubkey)
        + "\n"
        + f"@revoked * {h1.host_pubkey}\n"
    )
    canary = tmp_path / "canary"
    t = closing(SSHTransport(host(lab, "h1", tmp_path / "r", known_hosts=str(kh))))
    with pytest.raises(HostUnreachable) as err:
        t.run(["touch", str(canary)], timeout_s=5)
    assert f"host key for {h1.address}:{h1.port} is revoked by {kh}:3" in str(err.value)
    assert err.value.exit_code == 4 and err.value.host == "h1"
    assert not canary.exists(), "nothing ran on a host with a revoked key"


def test_cert_authority_and_malformed_lines_are_warnings_naming_file_and_line(fault_lab, tmp_path, closing):
    lab = fault_lab(2)
    h1 = lab.host("h1")
    ca = keygen(tmp_path / "ca_key")
    kh = tmp_path / "known_hosts"
    kh.write_text(
        f"@cert-authority *.example.org {ca}\n"
        "garbage\n"
        f"[{h1.address}]:{h1.port} ssh-ed25519 !!!not-base64!!!\n"
        + known_hosts_line(h1.address, h1.port, h1.host_pubkey)
        + "\n"
    )
    t = closing(SSHTransport(host(lab, "h1", tmp_path / "r", known_hosts=str(kh))))
    first = t.run(["true"], timeout_s=10)
    assert first.ok, first
    joined = "\n".join(first.warnings)
    assert f"{kh}:1: @cert-authority line skipped" in joined
    assert f"{kh}:2: malformed line skipped" in joined
    assert f"{kh}:3: malformed line skipped" in joined
    assert t.run(["true"], timeout_s=10).warnings == [], "reported once"
    # a host known only through the CA line is refused, not accepted
    only_ca = closing(SSHTransport(host(lab, "h2", tmp_path / "r2", known_hosts=str(kh))))
    with pytest.raises(HostUnreachable, match="is not in known_hosts"):
        only_ca.run(["true"], timeout_s=5)


# ------------------------------------------------------------------ ssh_config and ProxyJump


def test_ssh_config_alias_gives_hostname_port_user_and_identity_file(fault_lab, tmp_path, closing, monkeypatch):
    lab = fault_lab(1)
    h1 = lab.host("h1")
    cfg = tmp_path / "ssh_config"
    cfg.write_text(
        f"Host gpu-node-17\n  HostName {h1.address}\n  Port {h1.port}\n  User root\n  IdentityFile {lab.client_key}\n"
    )
    monkeypatch.setenv("ORCHESTRATOR_SSH_CONFIG", str(cfg))
    t = closing(SSHTransport(host(lab, "h1", tmp_path / "r", address="gpu-node-17", port=22, user=None, ssh_key=None)))
    assert (t.address, t.port, t.user) == (h1.address, h1.port, "root")
    assert _where(t) == [h1.address, str(h1.port)]
    monkeypatch.setenv("ORCHESTRATOR_SSH_CONFIG", "none")
    plain = closing(SSHTransport(host(lab, "h1", tmp_path / "r", address="gpu-node-17", port=22, ssh_key=None)))
    with pytest.raises(HostUnreachable, match="cannot resolve address 'gpu-node-17'"):
        plain.run(["true"], timeout_s=5)


def test_proxy_jump_goes_through_a_strictly_checked_bastion(fault_lab, tmp_path, closing):
    lab = fault_lab(2)  # h1 is the bastion, h2 the target
    b, target = lab.host("h1"), lab.host("h2")
    jump = f"root@{b.address}:{b.port}"
    t = closing(SSHTransport(host(lab, "h2", tmp_path / "r", proxy_jump=jump)))
    before = set(descendants(b.pid))
    assert _where(t) == [target.address, str(target.port)]
    assert set(descendants(b.pid)) - before, "the bastion holds a session for the jump"
    t.close()

    # the bastion's key is checked like any host's: unknown -> refused, naming the bastion
    kh = tmp_path / "only_target"
    kh.write_text(known_hosts_line(target.address, target.port, target.host_pubkey) + "\n")
    strict = closing(SSHTransport(host(lab, "h2", tmp_path / "r", proxy_jump=jump, known_hosts=str(kh))))
    with pytest.raises(HostUnreachable) as err:
        strict.run(["true"], timeout_s=5)
    assert f"h2: via bastion {jump}: host key for {b.address}:{b.port} is not in known_hosts" in str(err.value)

    # the target really depends on the bastion: bastion down -> unreachable, naming the bastion
    lab.kill_host("h1")
    down = closing(SSHTransport(host(lab, "h2", tmp_path / "r", proxy_jump=jump)))
    with pytest.raises(HostUnreachable, match=f"h2: via bastion {jump}: cannot connect"):
        down.run(["true"], timeout_s=5)
    direct = closing(SSHTransport(host(lab, "h2", tmp_path / "r")))
    assert direct.run(["true"], timeout_s=5).ok, "the target itself is up"


def test_proxy_jump_from_ssh_config(fault_lab, tmp_path, closing, monkeypatch):
    lab = fault_lab(2)
    b, target = lab.host("h1"), lab.host("h2")
    cfg = tmp_path / "ssh_config"
    cfg.write_text(
        f"Host bastion\n  HostName {b.address}\n  Port {b.port}\n"
        f"Host gpu-b\n  HostName {target.address}\n  Port {target.port}\n  ProxyJump bastion\n"
    )
    monkeypatch.setenv("ORCHESTRATOR_SSH_CONFIG", str(cfg))
    t = closing(SSHTransport(host(lab, "h2", tmp_path / "r", address="gpu-b", port=22)))
    assert t.proxy_jump == "bastion"
    before = set(descendants(b.pid))
    assert _where(t) == [target.address, str(target.port)]
    assert set(descendants(b.pid)) - before


# ------------------------------------------------------------------ agent and encrypted keys


@pytest.fixture
def agent(tmp_path) -> object:
    import shutil

    if not (shutil.which("ssh-agent") and shutil.which("ssh-add")):
        pytest.skip("ssh-agent/ssh-add not installed (openssh-client)")
    sock = tmp_path / "agent.sock"
    proc = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(sock.exists, 10, "ssh-agent socket")
    yield sock
    proc.kill()
    proc.wait(5)


def test_an_encrypted_key_works_through_the_agent_and_fails_clearly_without(
    fault_lab, tmp_path, closing, monkeypatch, agent
):
    lab = fault_lab(1)
    key = tmp_path / "deploy_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "s3cret", "-C", "deploy", "-f", str(key)], check=True)
    with open(Path(lab.root, "authorized_keys"), "a") as fh:
        fh.write(key.with_suffix(".pub").read_text())
    askpass = tmp_path / "askpass"
    askpass.write_text("#!/bin/sh\necho s3cret\n")
    askpass.chmod(0o700)
    env = dict(os.environ, SSH_AUTH_SOCK=str(agent), SSH_ASKPASS=str(askpass), SSH_ASKPASS_REQUIRE="force")
    subprocess.run(["ssh-add", str(key)], env=env, check=True, stdin=subprocess.DEVNULL, capture_output=True)

    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    without = closing(SSHTransport(host(lab, "h1", tmp_path / "r", ssh_key=str(key))))
    with pytest.raises(HostUnreachable) as err:
        without.run(["true"], timeout_s=5)
    assert f"h1: key {key} is encrypted and no ssh-agent is available" in str(err.value)
    assert f"ssh-add {key}" in str(err.value) and "s3cret" not in str(err.value)

    monkeypatch.setenv("SSH_AUTH_SOCK", str(agent))
    started = time.monotonic()
    with_agent = closing(SSHTransport(host(lab, "h1", tmp_path / "r", ssh_key=str(key))))
    assert with_agent.run(["true"], timeout_s=10).ok
    assert time.monotonic() - started < 10

"""YAML inputs: duplicate keys exit 3 naming file:line; every bad host is named; `local` needs `connection:`."""

from __future__ import annotations

import json
import re
import textwrap

import pytest
from core_helpers import REPO, invoke, phase, step, tool

from orchestrator.errors import ExitCode, SpecError
from orchestrator.inventory import load_inventory
from orchestrator.specs import load_catalog
from orchestrator.yamlio import load_yaml_document


def write(path, text: str) -> None:
    path.write_text(textwrap.dedent(text).lstrip("\n"))


def test_duplicate_key_in_inventory_host_exits_3_naming_file_line_and_key(ws):
    write(
        ws.inventory,
        """
        hosts:
          - name: a
            connection: local
            remote_root: /tmp/x
            remote_root: /tmp/y
        """,
    )
    before = ws.state_bytes()
    with pytest.raises(SpecError) as ei:
        load_inventory(ws.inventory)
    assert ei.value.exit_code == ExitCode.INVALID_SPEC
    assert ei.value.message.startswith(f"{ws.inventory}:5:5: malformed YAML: duplicate key 'remote_root'")
    assert "first at line 4" in ei.value.message
    r = invoke("inventory", "check", "--json")
    assert r.exit_code == 3, r.output
    assert json.loads(r.stdout)["errors"][0]["message"].startswith(f"{ws.inventory}:5:")
    assert ws.state_bytes() == before  # nothing written


def test_duplicate_top_level_key_in_inventory_is_refused(ws):
    write(
        ws.inventory,
        """
        hosts:
          - {name: a, connection: local}
        hosts:
          - {name: b, connection: local}
        """,
    )
    r = invoke("inventory", "check")
    assert r.exit_code == 3, r.output
    assert f"{ws.inventory}:3:1: malformed YAML: duplicate key 'hosts' (first at line 1)" in r.stderr


def test_duplicate_key_in_phase_spec_exits_3_naming_file_and_line(ws):
    path = ws.phases / "0-a.yaml"
    write(
        path,
        f"""
        id: 0
        name: a
        order: 0
        title: t
        steps:
          - id: s
            title: step s
            command: {json.dumps(tool())}
            timeout_s: 30
            timeout_s: 3000
        """,
    )
    with pytest.raises(SpecError, match=re.escape(f"{path}:10:5: malformed YAML: duplicate key 'timeout_s'")):
        load_catalog(ws.phases)
    r = invoke("phases", "--json")
    assert r.exit_code == 3
    assert "duplicate key 'timeout_s' (first at line 9)" in json.loads(r.stdout)["errors"][0]["message"]


def test_merge_keys_may_be_overridden_and_safe_load_semantics_hold(tmp_path):
    p = tmp_path / "m.yaml"
    write(
        p,
        """
        base: &b {port: 22, user: deploy}
        host:
          <<: *b
          port: 2222
        when: 2024-01-01
        flag: yes
        """,
    )
    doc = load_yaml_document(p, what="test")
    assert doc.data["host"] == {"port": 2222, "user": "deploy"}
    assert doc.data["flag"] is True and str(doc.data["when"]) == "2024-01-01"
    assert doc.line_of(("host", "port")) == 4 and doc.line_of(("host", "nope")) == 2


def test_python_tags_are_refused_as_with_safe_load(tmp_path):
    p = tmp_path / "evil.yaml"
    p.write_text("x: !!python/object/apply:os.system ['true']\n")
    with pytest.raises(SpecError, match=r"evil\.yaml:1:\d+: malformed YAML"):
        load_yaml_document(p, what="test")


SSH = {"connection": "ssh", "known_hosts": "/k"}


def test_validation_errors_name_every_bad_host_with_its_line(ws):
    write(
        ws.inventory,
        """
        defaults: {known_hosts: /k}
        hosts:
          - {name: g1, address: 10.0.0.1, port: 0}
          - {name: g2, address: 10.0.0.2}
          - {name: g3, address: 10.0.0.3, port: 70000}
          - {name: g4, address: 10.0.0.4, arch: sm_75}
        """,
    )
    with pytest.raises(SpecError) as ei:
        load_inventory(ws.inventory)
    msg = ei.value.message
    assert msg.startswith(f"{ws.inventory}:3: hosts[0](g1).port:"), msg
    assert "line 5: hosts[2](g3).port:" in msg and "line 6: hosts[3](g4).arch:" in msg
    assert "g2" not in msg
    assert ei.value.host == "g1,g3,g4"
    r = invoke("inventory", "check")
    assert r.exit_code == 3 and all(h in r.stderr for h in ("g1", "g3", "g4")), r.stderr


def test_resolution_errors_name_every_host(ws):
    write(
        ws.inventory,
        """
        hosts:
          - {name: a, address: 10.0.0.1}
          - {name: b, connection: local}
          - {name: c, known_hosts: /k}
          - {name: a, connection: local}
        groups:
          canary: [zz, b, yy]
        """,
    )
    with pytest.raises(SpecError) as ei:
        load_inventory(ws.inventory)
    msg = ei.value.message
    assert msg.startswith(f"{ws.inventory}:2: hosts[0](a).known_hosts: required for ssh hosts"), msg
    assert "line 4: hosts[2](c).address: required for an ssh host" in msg
    assert "line 5: hosts[3](a).name: duplicate host name 'a' (also hosts[0])" in msg
    assert "line 7: groups.canary: group 'canary' names unknown host 'zz'" in msg
    assert "unknown host 'yy'" in msg
    assert ei.value.host == "a,c"


def test_host_named_local_without_connection_is_refused_as_ambiguous(ws):
    write(
        ws.inventory,
        """
        # a fleet file
        hosts:
          - name: local
            arch: sm_90a
        """,
    )
    ws.write_phase(phase(0, "a", [step("s", tool())]))
    r = invoke("run", "0", "--json")
    assert r.exit_code == 3, r.output
    err = json.loads(r.stdout)["errors"][0]
    assert err["message"].startswith(f"{ws.inventory}:3: hosts[0](local): a host named 'local' must say")
    assert "ambiguous" in err["message"]
    assert ws.state_bytes() is None  # nothing ran, nothing recorded


@pytest.mark.parametrize("connection", ["local", "ssh"])
def test_host_named_local_with_explicit_connection_is_accepted(ws, connection):
    extra = {"address": "10.0.0.9", **SSH} if connection == "ssh" else {}
    ws.inventory.write_text(json.dumps({"hosts": [{"name": "local", "connection": connection, **extra}]}))
    (h,) = load_inventory(ws.inventory).hosts
    assert h.connection == connection and h.is_local == (connection == "local")


def test_shipped_inventories_still_load():
    assert load_inventory(REPO / "inventory" / "local.yaml").hosts[0].is_local
    assert len(load_inventory(REPO / "inventory" / "example-blackwell.yaml").hosts) == 6

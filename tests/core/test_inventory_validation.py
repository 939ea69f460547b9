"""Inventories validate strictly: values that cannot be used safely exit 3 naming file:line and field."""

from __future__ import annotations

import json
import re

import pytest
import yaml
from core_helpers import REPO, invoke

from orchestrator.errors import SpecError
from orchestrator.inventory import load_inventory


def test_local_inventory_is_one_local_host():
    inv = load_inventory(REPO / "inventory" / "local.yaml")
    assert [(h.name, h.connection, h.arch) for h in inv.hosts] == [("local", "local", "sm_120a")]
    assert inv.hosts[0].model_family == "dense_mla", "no model_family: the dense MLA route"


def test_example_fleet_has_a_canary_and_prod_group_with_service_settings():
    inv = load_inventory(REPO / "inventory" / "example-blackwell.yaml")
    groups = inv.groups()
    assert groups["canary"] == ["bw-canary-01"] and len(groups["prod"]) == 5
    assert inv.canary(list(inv.hosts)).name == "bw-canary-01"
    for h in inv.hosts:
        assert h.connection == "ssh" and h.arch == "sm_120a" and h.known_hosts
        assert h.model_family == "dsa", "GLM-5-NVFP4 is a DSA model"
        assert h.service.restart and h.service.health_url and h.service.generate_url and h.service.python
    assert inv.select("prod")[0].name == "bw-prod-01"
    assert [h.port for h in inv.hosts][-1] == 2222


def write(ws, doc) -> str:
    ws.inventory.write_text(yaml.safe_dump(doc))
    return str(ws.inventory)


SSH = {"connection": "ssh", "known_hosts": "/etc/ssh/known", "address": "10.0.0.1"}


@pytest.mark.parametrize(
    "host,field",
    [
        ({"name": "bad name", **SSH}, "hosts[0](bad name).name"),
        ({"name": "-oProxyCommand=x", **SSH}, "hosts[0](-oProxyCommand=x).name"),
        ({"name": "h1", **SSH, "address": "10.0.0.1; rm -rf /"}, "hosts[0](h1).address"),
        ({"name": "h1", **SSH, "user": "root\nx"}, "hosts[0](h1).user"),
        ({"name": "h1", **SSH, "port": "twenty-two"}, "hosts[0](h1).port"),
        ({"name": "h1", **SSH, "port": 70000}, "hosts[0](h1).port"),
        ({"name": "h1", **SSH, "remote_root": "relative/path"}, "hosts[0](h1).remote_root"),
        ({"name": "h1", **SSH, "remote_root": "/srv/../etc"}, "hosts[0](h1).remote_root"),
        ({"name": "h1", **SSH, "remote_root": "/srv/a b"}, "hosts[0](h1).remote_root"),
        ({"name": "h1", **SSH, "arch": "sm_75"}, "hosts[0](h1).arch"),
        ({"name": "h1", **SSH, "model_family": "sparse"}, "hosts[0](h1).model_family"),
        ({"name": "h1", **SSH, "model_family": "DSA"}, "hosts[0](h1).model_family"),
        ({"name": "h1", **SSH, "connect_timeout_s": 0}, "hosts[0](h1).connect_timeout_s"),
        ({"name": "h1", **SSH, "service": {"health_url": "file:///etc/passwd"}}, "hosts[0](h1).service.health_url"),
        ({"name": "h1", **SSH, "service": {"restart": ["systemctl", "restart\x00x"]}}, "hosts[0](h1).service.restart"),
        ({"name": "h1", **SSH, "colour": "blue"}, "hosts[0](h1).colour"),
        ({"name": "h1", "connection": "ssh", "address": "10.0.0.1"}, "hosts[0](h1).known_hosts"),
        ({"name": "h1", "connection": "ssh", "known_hosts": "/k"}, "hosts[0](h1).address"),
    ],
)
def test_bad_host_fields_exit_3_with_file_and_field(ws, host, field):
    path = write(ws, {"hosts": [host]})
    with pytest.raises(SpecError) as ei:
        load_inventory(ws.inventory)
    where = re.compile(rf"{re.escape(path)}:\d+: {re.escape(field)}")
    assert where.match(ei.value.message), ei.value.message
    r = invoke("inventory", "check", "--json")
    assert r.exit_code == 3
    doc = json.loads(r.stdout)
    assert where.match(doc["errors"][0]["message"]), doc["errors"][0]


def test_duplicate_hosts_and_unknown_group_members_are_refused(ws):
    write(ws, {"hosts": [{"name": "a", "connection": "local"}, {"name": "a", "connection": "local"}]})
    with pytest.raises(SpecError, match="duplicate host name 'a'"):
        load_inventory(ws.inventory)
    write(ws, {"hosts": [{"name": "a", "connection": "local"}], "groups": {"canary": ["zz"]}})
    with pytest.raises(SpecError, match="group 'canary' names unknown host 'zz'"):
        load_inventory(ws.inventory)


def test_defaults_apply_and_hosts_override(ws):
    write(
        ws,
        {
            "defaults": {"user": "deploy", "known_hosts": "/k", "remote_root": "/srv/o", "arch": "sm_90a"},
            "hosts": [{"name": "a", "address": "a.example"}, {"name": "b", "address": "b", "arch": "sm_120a"}],
        },
    )
    inv = load_inventory(ws.inventory)
    assert [(h.user, h.remote_root, h.arch, h.python) for h in inv.hosts] == [
        ("deploy", "/srv/o", "sm_90a", "python3"),
        ("deploy", "/srv/o", "sm_120a", "python3"),
    ]


def test_model_family_defaults_to_dense_mla_and_defaults_apply(ws):
    write(
        ws,
        {
            "defaults": {"model_family": "dsa"},
            "hosts": [
                {"name": "glm", "connection": "local"},
                {"name": "dsv3", "connection": "local", "model_family": "dense_mla"},
                {"name": "unknown", "connection": "local", "model_family": "auto"},
            ],
        },
    )
    assert [h.model_family for h in load_inventory(ws.inventory).hosts] == ["dsa", "dense_mla", "auto"]
    write(ws, {"hosts": [{"name": "a", "connection": "local"}]})
    assert load_inventory(ws.inventory).hosts[0].model_family == "dense_mla"


def test_an_unknown_model_family_in_defaults_exits_3_naming_its_line(ws):
    ws.inventory.write_text("defaults:\n  model_family: glm5\nhosts:\n  - name: a\n    connection: local\n")
    with pytest.raises(SpecError) as ei:
        load_inventory(ws.inventory)
    assert re.match(rf"{re.escape(str(ws.inventory))}:2: defaults.model_family", ei.value.message), ei.value.message
    assert "dense_mla" in ei.value.message and "dsa" in ei.value.message
    assert invoke("run", "1", "--dry-run").exit_code == 3


def test_limit_names_hosts_or_groups_and_refuses_unknown(ws):
    write(ws, {"hosts": [{"name": n, "connection": "local"} for n in ("a", "b", "c")], "groups": {"g": ["c"]}})
    inv = load_inventory(ws.inventory)
    assert [h.name for h in inv.select("g,a")] == ["a", "c"]
    with pytest.raises(SpecError, match="--limit 'zz'"):
        inv.select("zz")


def test_inventory_check_shows_resolved_hosts(ws):
    r = invoke("inventory", "check", "--inventory", str(REPO / "inventory" / "example-blackwell.yaml"), "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["results"]["canary"] == "bw-canary-01" and len(doc["results"]["hosts"]) == 6


def test_missing_inventory_file_exits_3(ws, tmp_path):
    r = invoke("inventory", "check", "--inventory", str(tmp_path / "nope.yaml"))
    assert r.exit_code == 3 and "nope.yaml: inventory file not found" in r.stderr

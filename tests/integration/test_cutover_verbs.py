"""cutover_agent verbs against the SGLang stand-in in a temporary remote_root."""

from __future__ import annotations

import json
import os

import pytest
from cutover_helpers import make_bundle

SHA_A = "a" * 64
SHA_B = "b" * 64


def _config(root):
    return json.loads((root / "verify_backend.json").read_text())


def _pointer(root, name):
    p = root / name
    return os.readlink(p) if p.is_symlink() else None


def test_switch_points_current_at_the_bundle_and_keeps_previous(standin, cutover):
    root = standin.root
    make_bundle(root, SHA_A)
    make_bundle(root, SHA_B)
    rc, doc = cutover("switch", "--root", str(root), "--to", SHA_A)
    assert (rc, doc["ok"], doc["changed"]) == (0, True, True)
    assert _pointer(root, "current") == f"bundles/{SHA_A}" and _pointer(root, "previous") is None
    rc, doc = cutover("switch", "--root", str(root), "--to", SHA_B)
    assert rc == 0
    assert _pointer(root, "current") == f"bundles/{SHA_B}"
    assert _pointer(root, "previous") == f"bundles/{SHA_A}"
    assert _config(root) == {
        "verify_kernel": "bundled",
        "bundle_sha": SHA_B,
        "defrag": False,
        "model_family": "dense_mla",
    }


def test_switch_again_to_the_same_bundle_changes_nothing(standin, cutover):
    root = standin.root
    make_bundle(root, SHA_A)
    make_bundle(root, SHA_B)
    cutover("switch", "--root", str(root), "--to", SHA_A)
    cutover("switch", "--root", str(root), "--to", SHA_B)
    rc, doc = cutover("switch", "--root", str(root), "--to", SHA_B)
    assert (rc, doc["changed"]) == (0, False)
    assert _pointer(root, "previous") == f"bundles/{SHA_A}", "a repeated switch must not lose previous"


def test_switch_to_a_missing_or_damaged_bundle_fails_and_changes_nothing(standin, cutover):
    root = standin.root
    make_bundle(root, SHA_A)
    cutover("switch", "--root", str(root), "--to", SHA_A)
    before = (_pointer(root, "current"), (root / "verify_backend.json").read_bytes())
    rc, doc = cutover("switch", "--root", str(root), "--to", SHA_B)
    assert rc == 1 and "not unpacked" in doc["error"]
    d = make_bundle(root, SHA_B)
    (d / ".sha256").write_text("c" * 64)
    rc, doc = cutover("switch", "--root", str(root), "--to", SHA_B)
    assert rc == 1 and ".sha256" in doc["error"]
    assert (_pointer(root, "current"), (root / "verify_backend.json").read_bytes()) == before


def test_switch_rejects_a_bad_sha_and_a_relative_root_as_usage_errors(standin, cutover):
    rc, doc = cutover("switch", "--root", str(standin.root), "--to", "../../etc")
    assert rc == 2 and "sha256" in doc["error"]
    rc, doc = cutover("switch", "--root", "relative/root", "--to", SHA_A)
    assert rc == 2 and "absolute" in doc["error"]
    assert not (standin.root / "current").exists()


def test_set_config_edits_one_key_atomically_and_rejects_unknown_keys(standin, cutover):
    root = standin.root
    make_bundle(root, SHA_A)
    cutover("switch", "--root", str(root), "--to", SHA_A)
    rc, doc = cutover("set-config", "--root", str(root), "defrag=true")
    assert rc == 0 and doc["changed"] is True
    assert _config(root) == {
        "verify_kernel": "bundled",
        "bundle_sha": SHA_A,
        "defrag": True,
        "model_family": "dense_mla",
    }
    before = (root / "verify_backend.json").read_bytes()
    for bad in ("bogus=1", "defrag=maybe", "verify_kernel=fast", "noequals"):
        rc, doc = cutover("set-config", "--root", str(root), bad)
        assert rc == 2, bad
        assert doc["ok"] is False and doc["error"]
    assert (root / "verify_backend.json").read_bytes() == before
    assert not [p for p in os.listdir(root) if p.endswith(".tmp")], "no temp file left behind"


def test_baseline_then_identical_canary_passes(standin, cutover):
    root = standin.root
    make_bundle(root, SHA_A)
    standin.restart()
    standin.wait_up()
    rc, doc = cutover(
        "baseline",
        "--root",
        str(root),
        "--generate-url",
        standin.generate_url,
        "--health-url",
        standin.health_url,
        "--for",
        SHA_A,
    )
    assert (rc, doc["ok"], doc["prompts"], doc["reused"]) == (0, True, 8, False)
    cutover("switch", "--root", str(root), "--to", SHA_A)
    rc, doc = cutover(
        "restart", "--restart-json", standin.restart_json, "--health-url", standin.health_url, "--health-timeout", "20"
    )
    assert rc == 0 and doc["healthy"] is True and doc["body"]["verify_backend"] == "bundled"
    rc, doc = cutover(
        "canary", "--root", str(root), "--generate-url", standin.generate_url, "--health-url", standin.health_url
    )
    assert rc == 0, doc
    assert doc["outputs_identical"] is True and doc["errors"] == 0 and doc["mismatched_prompts"] == []
    assert doc["service"]["verify_backend"] == "bundled"
    assert doc["latency_ratio"] is not None and doc["latency_ratio"] > 0


def test_canary_reports_changed_outputs_and_fails(standin, cutover):
    root = standin.root
    make_bundle(root, SHA_A)
    standin.control(change_outputs="bundled")
    standin.restart()
    standin.wait_up()
    assert cutover("baseline", "--root", str(root), "--generate-url", standin.generate_url)[0] == 0
    cutover("switch", "--root", str(root), "--to", SHA_A)
    cutover("restart", "--restart-json", standin.restart_json, "--health-url", standin.health_url)
    rc, doc = cutover("canary", "--root", str(root), "--generate-url", standin.generate_url)
    assert rc == 1 and doc["ok"] is False
    assert doc["outputs_identical"] is False and len(doc["mismatched_prompts"]) == doc["prompts"] == 8


def test_canary_fails_on_a_latency_regression_beyond_the_bound(standin, cutover):
    root = standin.root
    make_bundle(root, SHA_A)
    standin.control(extra_latency="bundled", extra_latency_ms=150)
    standin.restart()
    standin.wait_up()
    cutover("baseline", "--root", str(root), "--generate-url", standin.generate_url)
    cutover("switch", "--root", str(root), "--to", SHA_A)
    cutover("restart", "--restart-json", standin.restart_json, "--health-url", standin.health_url)
    rc, doc = cutover(
        "canary", "--root", str(root), "--generate-url", standin.generate_url, "--max-latency-ratio", "1.5"
    )
    assert rc == 1 and doc["outputs_identical"] is True
    assert doc["latency_ratio"] > 1.5 and any("latency" in r for r in doc["reasons"])


def test_canary_without_a_baseline_fails_with_a_clear_error(standin, cutover):
    rc, doc = cutover("canary", "--root", str(standin.root), "--generate-url", standin.generate_url)
    assert rc == 1 and "no baseline" in doc["error"]


def test_baseline_after_the_switch_is_refused_unless_recorded_before(standin, cutover):
    root = standin.root
    make_bundle(root, SHA_A)
    standin.restart()
    standin.wait_up()
    cutover("switch", "--root", str(root), "--to", SHA_A)
    rc, doc = cutover("baseline", "--root", str(root), "--generate-url", standin.generate_url, "--for", SHA_A)
    assert rc == 1 and "roll back first" in doc["error"]
    assert not (root / "baseline.json").exists()


def test_baseline_is_reused_when_a_resumed_run_finds_the_host_switched(standin, cutover):
    root = standin.root
    make_bundle(root, SHA_A)
    standin.restart()
    standin.wait_up()
    cutover("baseline", "--root", str(root), "--generate-url", standin.generate_url, "--for", SHA_A)
    recorded = (root / "baseline.json").read_bytes()
    cutover("switch", "--root", str(root), "--to", SHA_A)
    rc, doc = cutover("baseline", "--root", str(root), "--generate-url", standin.generate_url, "--for", SHA_A)
    assert (rc, doc["reused"]) == (0, True)
    assert (root / "baseline.json").read_bytes() == recorded


def test_restart_times_out_when_health_fails(standin, cutover):
    make_bundle(standin.root, SHA_A)
    standin.control(fail_health="always")
    rc, doc = cutover(
        "restart",
        "--restart-json",
        standin.restart_json,
        "--health-url",
        standin.health_url,
        "--health-timeout",
        "2",
        "--poll",
        "0.2",
    )
    assert rc == 1 and doc["healthy"] is False and doc["status"] == 503
    assert 2.0 <= doc["waited_s"] < 8.0 and doc["attempts"] >= 2


def test_health_times_out_when_health_hangs(standin, cutover):
    standin.control(hang_health="always")
    standin.restart()
    rc, doc = cutover("health", "--health-url", standin.health_url, "--health-timeout", "2")
    assert rc == 1 and doc["healthy"] is False and "timed out" in doc["error"].lower()
    assert doc["waited_s"] < 8.0


def test_restart_with_a_bad_restart_json_is_a_usage_error(cutover, standin):
    for bad in ("not json", "[]", '"a string"', "[1, 2]"):
        rc, doc = cutover("restart", "--restart-json", bad, "--health-url", standin.health_url)
        assert rc == 2, bad


def test_rollback_restores_previous_sets_stock_and_the_service_comes_back(standin, cutover):
    root = standin.root
    make_bundle(root, SHA_A)
    make_bundle(root, SHA_B)
    cutover("switch", "--root", str(root), "--to", SHA_A)
    cutover("switch", "--root", str(root), "--to", SHA_B)
    standin.control(fail_health="bundled")
    rc, doc = cutover(
        "restart", "--restart-json", standin.restart_json, "--health-url", standin.health_url, "--health-timeout", "1.5"
    )
    assert rc == 1, "the bundled kernel makes health fail"
    rc, doc = cutover(
        "rollback",
        "--root",
        str(root),
        "--from",
        SHA_B,
        "--restart-json",
        standin.restart_json,
        "--health-url",
        standin.health_url,
        "--health-timeout",
        "20",
    )
    assert rc == 0 and doc["rolled_back"] is True and doc["healthy"] is True
    assert _pointer(root, "current") == f"bundles/{SHA_A}"
    cfg = _config(root)
    assert cfg["verify_kernel"] == "stock" and cfg["rolled_back_from"] == SHA_B
    assert doc["body"]["verify_backend"] == "stock"


def test_rollback_of_a_first_cutover_removes_current(standin, cutover):
    root = standin.root
    make_bundle(root, SHA_A)
    cutover("switch", "--root", str(root), "--to", SHA_A)
    rc, doc = cutover("rollback", "--root", str(root), "--from", SHA_A)
    assert rc == 0 and doc["rolled_back"] is True
    assert not (root / "current").exists() and _config(root)["verify_kernel"] == "stock"


def test_rollback_of_a_host_never_switched_leaves_it_alone(standin, cutover):
    root = standin.root
    make_bundle(root, SHA_A)
    make_bundle(root, SHA_B)
    cutover("switch", "--root", str(root), "--to", SHA_A)
    before = (_pointer(root, "current"), (root / "verify_backend.json").read_bytes())
    rc, doc = cutover("rollback", "--root", str(root), "--from", SHA_B)
    assert rc == 0 and doc["rolled_back"] is False
    assert (_pointer(root, "current"), (root / "verify_backend.json").read_bytes()) == before


def test_rollback_is_idempotent(standin, cutover):
    root = standin.root
    make_bundle(root, SHA_A)
    make_bundle(root, SHA_B)
    cutover("switch", "--root", str(root), "--to", SHA_A)
    cutover("switch", "--root", str(root), "--to", SHA_B)
    assert cutover("rollback", "--root", str(root), "--from", SHA_B)[0] == 0
    state = (_pointer(root, "current"), _config(root))
    assert cutover("rollback", "--root", str(root), "--from", SHA_B)[0] == 0
    assert (_pointer(root, "current"), _config(root)) == state


def test_stage_installs_the_loader_entry_point_into_the_service_python(tmp_path, cutover):
    import sys

    root = tmp_path / "root"
    root.mkdir()
    target = tmp_path / "site"
    rc, doc = cutover(
        "stage", "--root", str(root), "--service-python", sys.executable, "--target", str(target), timeout=300
    )
    assert rc == 0, doc
    assert doc["entry_points"] == [
        {"name": "orchestrator_mla_verify", "value": "mla_verify_loader:load", "version": "1.0.0"}
    ]
    assert json.loads((target / "mla_verify_loader" / "root.json").read_text()) == {"remote_root": str(root)}


def test_stage_with_a_missing_service_python_fails_cleanly(tmp_path, cutover):
    rc, doc = cutover("stage", "--root", str(tmp_path), "--service-python", str(tmp_path / "nope" / "python"))
    assert rc == 1 and "not found" in doc["error"]


@pytest.mark.parametrize("verb", ["switch", "canary", "rollback", "set-config"])
def test_every_verb_prints_exactly_one_json_document_on_usage_errors(verb, cutover):
    rc, doc = cutover(verb)
    assert rc == 2 and doc["ok"] is False


def test_a_switch_interrupted_between_the_two_pointers_converges_when_run_again(tmp_path, monkeypatch, capsys):
    """Crash after `previous` moved but before `current` did: a re-run finishes the same switch."""
    import cutover_agent.__main__ as cutover

    root = tmp_path
    make_bundle(root, SHA_A)
    make_bundle(root, SHA_B)
    assert cutover.main(["switch", "--root", str(root), "--to", SHA_A, "--json"]) == 0
    real = cutover._set_pointer

    def crash_on_current(r, name, sha):
        if name == "current":
            raise KeyboardInterrupt("killed mid-switch")
        real(r, name, sha)

    monkeypatch.setattr(cutover, "_set_pointer", crash_on_current)
    with pytest.raises(KeyboardInterrupt):
        cutover.main(["switch", "--root", str(root), "--to", SHA_B, "--json"])
    assert _pointer(root, "current") == f"bundles/{SHA_A}", "current is still the old, complete target"
    assert _config(root)["bundle_sha"] == SHA_A, "config not yet switched either"
    monkeypatch.setattr(cutover, "_set_pointer", real)
    assert cutover.main(["switch", "--root", str(root), "--to", SHA_B, "--json"]) == 0
    assert (_pointer(root, "current"), _pointer(root, "previous")) == (f"bundles/{SHA_B}", f"bundles/{SHA_A}")
    assert _config(root)["bundle_sha"] == SHA_B
    capsys.readouterr()


def test_rollback_to_a_previous_bundle_that_is_gone_fails_and_changes_nothing(standin, cutover):
    import shutil

    root = standin.root
    make_bundle(root, SHA_A)
    make_bundle(root, SHA_B)
    cutover("switch", "--root", str(root), "--to", SHA_A)
    cutover("switch", "--root", str(root), "--to", SHA_B)
    shutil.rmtree(root / "bundles" / SHA_A)
    before = (_pointer(root, "current"), (root / "verify_backend.json").read_bytes())
    rc, doc = cutover("rollback", "--root", str(root), "--from", SHA_B)
    assert rc == 1 and "not unpacked" in doc["error"]
    assert (_pointer(root, "current"), (root / "verify_backend.json").read_bytes()) == before


def test_canary_fails_when_the_service_did_not_load_the_plugin(standin, cutover):
    """Identical outputs are not enough: the restarted service must have built the bundled backend."""
    root = standin.root
    make_bundle(root, SHA_A)
    standin.control(plugin_missing="bundled")
    standin.restart()
    standin.wait_up()
    cutover("baseline", "--root", str(root), "--generate-url", standin.generate_url)
    cutover("switch", "--root", str(root), "--to", SHA_A)
    cutover("restart", "--restart-json", standin.restart_json, "--health-url", standin.health_url)
    rc, doc = cutover("canary", "--root", str(root), "--generate-url", standin.generate_url)
    assert rc == 1 and doc["outputs_identical"] is True and doc["kernel_active"] is False
    # active.json is the one the stock start wrote: the bundled start left none of its own
    assert any("not running the bundled kernel: rank tp0: active.json says stock" in r for r in doc["reasons"])
    (root / "active.json").unlink()
    rc, doc = cutover("canary", "--root", str(root), "--generate-url", standin.generate_url)
    assert rc == 1 and any("no active.json" in r for r in doc["reasons"])


def test_canary_fails_when_the_service_was_not_restarted_after_the_switch(standin, cutover):
    root = standin.root
    make_bundle(root, SHA_A)
    standin.restart()
    standin.wait_up()
    cutover("baseline", "--root", str(root), "--generate-url", standin.generate_url)
    cutover("switch", "--root", str(root), "--to", SHA_A)
    rc, doc = cutover("canary", "--root", str(root), "--generate-url", standin.generate_url)
    assert rc == 1 and doc["kernel_active"] is False
    assert doc["active"]["verify_kernel"] == "stock"


def test_stage_into_a_bare_service_venv_needs_pip_only(tmp_path, cutover):
    """The real path (no --target): a venv without setuptools or wheel gets the loader."""
    import subprocess
    import sys

    venv = tmp_path / "svc"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)], check=True, timeout=120
    )
    py = venv / "bin" / "python"
    probe = subprocess.run([str(py), "-c", "import pip"], capture_output=True, timeout=60)
    if probe.returncode != 0:
        pytest.skip("the base interpreter has no pip to lend the bare venv")
    root = tmp_path / "root"
    root.mkdir()
    rc, doc = cutover("stage", "--root", str(root), "--service-python", str(py), timeout=300)
    assert rc == 0, doc
    out = subprocess.run(
        [str(py), "-c", "import mla_verify_loader as m; print(m.find_root())"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert out.stdout.strip() == str(root)


def test_the_built_wheel_matches_the_service_packages_pyproject():
    from pathlib import Path

    import tomllib

    import cutover_agent.__main__ as cutover

    doc = tomllib.loads((Path(cutover.LOADER_DIR) / "pyproject.toml").read_text())
    assert doc["project"]["name"] == cutover.LOADER_DIST
    assert doc["project"]["version"] == cutover.LOADER_VERSION
    [(name, value)] = doc["project"]["entry-points"][cutover.PLUGIN_GROUP].items()
    assert f"{name} = {value}" == cutover.LOADER_ENTRY_POINT
    assert doc["tool"]["setuptools"]["packages"] == [cutover.LOADER_MODULE]


def _cut_over(standin, cutover, **control):
    """Baseline on stock, switch to SHA_A, restart with the given stand-in control, canary."""
    root = standin.root
    make_bundle(root, SHA_A)
    standin.control(**control)
    standin.restart()
    standin.wait_up()
    cutover("baseline", "--root", str(root), "--generate-url", standin.generate_url)
    cutover("switch", "--root", str(root), "--to", SHA_A)
    cutover("restart", "--restart-json", standin.restart_json, "--health-url", standin.health_url)
    return cutover("canary", "--root", str(root), "--generate-url", standin.generate_url)


def test_canary_passes_only_with_every_rank_on_the_bundled_kernel(standin, cutover):
    rc, doc = _cut_over(standin, cutover, tp=4)
    assert rc == 0 and doc["ok"], doc["reasons"]
    assert (doc["ranks_total"], doc["ranks_all_active"], doc["declined_verify_calls"]) == (4, True, 0)
    assert doc["captured_sizes_not_bundled"] == 0
    active = json.loads((standin.root / "active.json").read_text())
    assert sorted(active["ranks"]) == ["tp0", "tp1", "tp2", "tp3"]
    # 8 baseline prompts ran on stock (not counted), 8 canary prompts on each of 4 ranks.
    assert active["eager_routed"] == 4 * 8 and active["eager_declined"] == 0


def test_canary_fails_when_verify_calls_are_declined_while_it_runs(standin, cutover):
    rc, doc = _cut_over(standin, cutover, tp=2, decline_verify="bundled")
    assert rc == 1 and doc["outputs_identical"] is True and doc["kernel_active"] is True
    assert doc["declined_verify_calls"] == 2 * 8
    assert doc["declined_during_canary"]["tp1"]["reasons"] == {"kv dtype fp8_e5m2 unsupported": 8}
    assert any("declined during the canary" in r for r in doc["reasons"])


def test_canary_fails_when_a_captured_batch_size_replays_sglangs_kernel(standin, cutover):
    rc, doc = _cut_over(standin, cutover, tp=2, capture_on_sglang="bundled", captured_bs=[1, 2, 4])
    assert rc == 1 and doc["declined_verify_calls"] == 0 and doc["captured_sizes_not_bundled"] == 2
    assert {(c["rank"], c["bs"]) for c in doc["captured_not_bundled"]} == {("tp0", 4), ("tp1", 4)}


def test_canary_fails_when_one_rank_never_recorded_the_plugin(standin, cutover):
    rc, doc = _cut_over(standin, cutover, tp=4, rank_missing="bundled")
    assert rc == 1 and doc["kernel_active"] is False and doc["ranks_all_active"] is False
    # tp3's record is still the one its stock process wrote before the switch: never taken as bundled.
    assert any("rank tp3: active.json says stock" in r for r in doc["reasons"]), doc["reasons"]
    (standin.root / "active.d" / "tp3.json").unlink()
    rc, doc = cutover("canary", "--root", str(standin.root), "--generate-url", standin.generate_url)
    assert rc == 1 and any("without a record" in r and "['tp3']" in r for r in doc["reasons"]), doc["reasons"]

"""The plugin as a service process runs it (issue 11), on CPU against the real sglang 0.5.23.

- the kernel library is prebuilt by phase 0 and only LOADED in a service: a stale JIT build
  lock does not block it; a missing or mismatched library declines every verify call with
  the reason, and active.json says so;
- an fp8_e4m3 KV cache (SGLang's MLA pool, uint8 viewed as float8_e4m3fn) is routed to the bundled kernel
  with SGLang's own scales; fp8_e5m2 is declined with "kv dtype fp8_e5m2 unsupported", never reported as bundled;
- every process (TP rank) writes its own record, active.json merges them (no last writer
  wins), and says per captured batch size which kernel the graph will replay;
- Hugging Face ``kernels`` (which SGLang imports) and the bundle coexist in either import order.

The prebuilt library used here is a REAL Python extension module compiled with gcc from a
few lines of C (no CUDA on this machine): it has the name and ``fwd`` symbol the loader
requires, so the load path (hash record, ExtensionFileLoader) runs for real.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import time
from pathlib import Path

import pytest

from tests.support.paths import KERNELS, load_service_loader

pytestmark = pytest.mark.sglang
REPO = KERNELS.parent


def _build_module():
    import mla_verify._build as build

    return build


def _write_record(build, folder: Path, lib: Path, arch: str = "sm_90a", **over) -> None:
    rec = {
        "arch": arch,
        "library": build.LIBRARY_NAME,
        "sha256": build.sha256_file(lib),
        "source_hash": build.source_hash(arch),
        **build.interpreter_tags(),
        **over,
    }
    (folder / build.RECORD_NAME).write_text(json.dumps(rec))


C_EXT = textwrap.dedent(
    """
    #include <Python.h>
    static PyObject *fwd(PyObject *self, PyObject *args) { Py_RETURN_NONE; }
    static PyMethodDef M[] = {{"fwd", fwd, METH_VARARGS, "stand-in"}, {NULL, NULL, 0, NULL}};
    static struct PyModuleDef D = {PyModuleDef_HEAD_INIT, "mla_verify_ext", NULL, -1, M};
    PyMODINIT_FUNC PyInit_mla_verify_ext(void) { return PyModule_Create(&D); }
    """
)


@pytest.fixture
def prebuilt(tmp_path, monkeypatch):
    """<build>/sm_90a/mla_verify_ext.so (a real, loadable extension module) + its record."""
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler to build the stand-in extension module")
    build = _build_module()
    root = tmp_path / "build"
    folder = root / "sm_90a"
    folder.mkdir(parents=True)
    src = tmp_path / "ext.c"
    src.write_text(C_EXT)
    lib = folder / build.LIBRARY_NAME
    inc = sysconfig.get_paths()["include"]
    subprocess.run([cc, "-shared", "-fPIC", f"-I{inc}", str(src), "-o", str(lib)], check=True, timeout=120)
    _write_record(build, folder, lib)
    monkeypatch.setenv(build.BUILD_DIR_ENV, str(root))
    monkeypatch.setattr(build, "_MODULES", {})
    return folder


# ----------------------------------------------------------------------------- prebuilt library


def test_a_stale_jit_build_lock_does_not_block_the_service_path(tmp_path):
    """A build killed mid-way leaves torch's lock; a service process never waits on it."""
    build = _build_module()
    cache = tmp_path / "cache"
    lock_dir = cache / build.source_hash("sm_90a")
    lock_dir.mkdir(parents=True)
    (lock_dir / "lock").write_text("")  # what a killed cpp_extension build leaves behind
    code = textwrap.dedent(
        """
        import sys, time
        t0 = time.time()
        from mla_verify import _build
        try:
            _build.load("sm_90a")
        except ImportError as exc:
            print(type(exc).__name__, round(time.time() - t0, 2), exc)
        else:
            print("LOADED")
        """
    )
    env = {
        **os.environ,
        "MLA_VERIFY_PREBUILT_ONLY": "1",
        "ORCHESTRATOR_KERNEL_CACHE": str(cache),
        "MLA_VERIFY_BUILD_DIR": str(tmp_path / "no-build"),
        "PYTHONPATH": str(KERNELS),
    }
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env, cwd=str(KERNELS)
    )
    name, secs, reason = proc.stdout.strip().split(" ", 2)
    assert name == "PrebuiltUnavailable", proc.stdout + proc.stderr
    assert float(secs) < 10, "the service path must not wait on the build lock"
    assert reason.startswith("prebuilt library missing")
    assert (lock_dir / "lock").exists() and not any(p.suffix == ".so" for p in lock_dir.iterdir())


def test_the_prebuilt_library_loads_without_a_compiler_or_a_writable_home(prebuilt, monkeypatch):
    build = _build_module()
    monkeypatch.setenv("MLA_VERIFY_PREBUILT_ONLY", "1")
    monkeypatch.setenv("HOME", "/nonexistent")
    monkeypatch.setenv("PATH", "/nonexistent")  # no nvcc, no ninja
    mod = build.load("sm_90a")
    assert mod.__name__ == build.EXT_NAME and callable(mod.fwd)
    with pytest.raises(build.PrebuiltUnavailable, match="prebuilt-only"):
        build.load_jit("sm_90a")


@pytest.mark.parametrize(
    "damage,reason",
    [
        ("delete_library", "prebuilt library missing"),
        ("delete_record", "prebuilt library missing: no"),
        ("flip_a_byte", "prebuilt library hash mismatch"),
        ("other_sources", "built from other sources"),
        ("other_torch", "built for torch"),
        ("other_arch", "is for sm_120a"),
    ],
)
def test_a_missing_or_mismatched_library_declines_with_the_reason(prebuilt, damage, reason):
    build = _build_module()
    lib, rec = prebuilt / build.LIBRARY_NAME, prebuilt / build.RECORD_NAME
    if damage == "delete_library":
        lib.unlink()
    elif damage == "delete_record":
        rec.unlink()
    elif damage == "flip_a_byte":
        data = bytearray(lib.read_bytes())
        data[-1] ^= 0xFF
        lib.write_bytes(bytes(data))
    elif damage == "other_sources":
        _write_record(build, prebuilt, lib, source_hash="0" * 16)
    elif damage == "other_torch":
        _write_record(build, prebuilt, lib, torch="0.0.0")
    elif damage == "other_arch":
        _write_record(build, prebuilt, lib, arch="sm_120a")
    with pytest.raises(build.PrebuiltUnavailable, match=reason):
        build.load_prebuilt("sm_90a")


def _register_with_config(tmp_path, monkeypatch, **cfg):
    import sglang_verify_plugin as plugin

    doc = {"verify_kernel": "bundled", "bundle_sha": "e" * 64, "defrag": False, **cfg}
    (tmp_path / "verify_backend.json").write_text(json.dumps(doc))
    monkeypatch.setenv("ORCHESTRATOR_VERIFY_CONFIG", str(tmp_path / "verify_backend.json"))
    assert plugin.register()
    return plugin


def _active(folder: Path) -> dict:
    return json.loads((folder / "active.json").read_text())


def _batch(**kw):
    from sglang_verify_batch import build_verify_batch

    vb = build_verify_batch(kw.pop("prefix_lens", (5, 9)), kw.pop("n", 3), kw.pop("heads", 4), seed=3, **kw)
    vb.backend.init_forward_metadata(vb.forward_batch)
    return vb


class SGLangKernel:
    """RECORDING STAND-IN for SGLang's extend_attention_fwd (no CUDA here)."""

    def __init__(self):
        self.calls = 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        args[3].fill_(-1.0)


@pytest.mark.parametrize("damage", ["missing", "hash"])
def test_the_service_backend_declines_when_the_library_is_missing_or_differs(
    sglang_ready, prebuilt, tmp_path, monkeypatch, damage
):
    """As on a GPU host (the arch lookup is the only CUDA part replaced): register() puts the
    process in prebuilt-only mode, the backend preflight finds the library unusable, every
    verify call goes to SGLang's kernel, and active.json says why."""
    import sglang_verify_plugin.verify_hook as vh

    build = _build_module()
    monkeypatch.setattr(vh, "device_arch", lambda device: "sm_90a")
    lib = prebuilt / build.LIBRARY_NAME
    if damage == "missing":
        lib.unlink()
    else:
        lib.write_bytes(lib.read_bytes() + b"\0")
    plugin = _register_with_config(tmp_path, monkeypatch)
    try:
        assert os.environ["MLA_VERIFY_PREBUILT_ONLY"] == "1"
        vb = _batch()
        bv = vb.backend.bundled_verify
        want = "prebuilt library missing" if damage == "missing" else "prebuilt library hash mismatch"
        assert bv.static_decline.startswith(want)
        active = _active(tmp_path)
        assert (active["verify_kernel"], active["route"]) == ("stock", "declined")
        assert want in active["reason"] and active["all_ranks_active"] is False
        sglang = SGLangKernel()
        vb.backend.extend_attention_fwd = sglang
        vb.backend.forward_extend(vb.q, vb.k, vb.v, vb.layer, vb.forward_batch)
        assert sglang.calls == 1 and bv.bundled_calls == 0
        assert bv.stats()["eager"]["declined"] == 1
    finally:
        plugin.unregister()


def test_the_service_backend_loads_the_checked_library_and_records_its_hash(
    sglang_ready, prebuilt, tmp_path, monkeypatch
):
    import sglang_verify_plugin.verify_hook as vh

    build = _build_module()
    monkeypatch.setattr(vh, "device_arch", lambda device: "sm_90a")
    plugin = _register_with_config(tmp_path, monkeypatch)
    try:
        vb = _batch()
        bv = vb.backend.bundled_verify
        assert bv.static_decline is None
        sha = build.sha256_file(prebuilt / build.LIBRARY_NAME)
        assert bv.library["sha256"] == sha and bv.library["arch"] == "sm_90a"
        active = _active(tmp_path)
        assert (active["verify_kernel"], active["route"], active["all_ranks_active"]) == ("bundled", "hook", True)
        (rank,) = active["ranks"].values()
        assert rank["backends"]["target"]["library"]["sha256"] == sha
    finally:
        plugin.unregister()


# ----------------------------------------------------------------------------- fp8 KV


def test_an_fp8_e4m3_kv_cache_is_routed_to_the_bundled_kernel_with_sglangs_scales(
    sglang_ready, prebuilt, tmp_path, monkeypatch
):
    """SGLang's fp8_e4m3 MLA pool (--kv-cache-dtype fp8_e4m3): the backend is active and every verify call reaches
    the kernel with the pool's float8_e4m3fn key buffer, its value view and SGLang's own k/v descales."""
    import torch
    from test_plugin_cpu import RecordingKernel

    import sglang_verify_plugin.verify_hook as vh
    from sglang_verify_plugin.config import flush

    monkeypatch.setattr(vh, "device_arch", lambda device: "sm_90a")
    plugin = _register_with_config(tmp_path, monkeypatch)
    try:
        vb = _batch(fp8_kv_cache=True)
        bv = vb.backend.bundled_verify
        assert bv.static_decline is None and bv.kv_dtype == "fp8_e4m3"
        active = _active(tmp_path)
        assert (active["verify_kernel"], active["route"], active["all_ranks_active"]) == ("bundled", "hook", True)
        kernel = RecordingKernel()
        bv._kernel = kernel
        sglang = SGLangKernel()
        vb.backend.extend_attention_fwd = sglang
        for _ in range(3):
            vb.backend.forward_extend(vb.q, vb.k, vb.v, vb.layer, vb.forward_batch)
        assert len(kernel.calls) == 3 and sglang.calls == 0
        args, kwargs = kernel.calls[0]
        pool = vb.runner.token_to_kv_pool
        k_buffer, v_buffer = args[4], args[5]
        assert k_buffer.dtype == torch.float8_e4m3fn and k_buffer.shape[-1] == 576
        assert k_buffer.data_ptr() == pool.get_key_buffer(0).data_ptr() == v_buffer.data_ptr()
        assert v_buffer.shape[-1] == 512 and args[1].dtype == torch.bfloat16  # the drafts stay bf16
        assert (kwargs["k_scale"], kwargs["v_scale"]) == (1.0, 1.0)  # no checkpoint kv scales: SGLang's descales
        flush()
        active = _active(tmp_path)
        assert active["eager_routed"] == 3 and active["eager_declined"] == 0
    finally:
        plugin.unregister()


def test_an_fp8_e5m2_k_buffer_is_declined_per_call_even_without_preflight(sglang_ready):
    import torch

    from sglang_verify_plugin.verify_hook import BundledVerify, kv_dtype_decline

    assert kv_dtype_decline(torch.float8_e5m2) == "kv dtype fp8_e5m2 unsupported"
    assert kv_dtype_decline(torch.float8_e4m3fn) is None and kv_dtype_decline(torch.bfloat16) is None
    hook = BundledVerify(kernel_loader=lambda: pytest.fail("the kernel must not be asked"))
    q = torch.zeros(2, 4, 576, dtype=torch.bfloat16)
    o = torch.zeros(2, 4, 512, dtype=torch.bfloat16)
    k = torch.zeros(2, 1, 576, dtype=torch.bfloat16)
    kb = torch.zeros(8, 1, 576, dtype=torch.float8_e5m2)
    qo = torch.tensor([0, 2], dtype=torch.int32)
    ran = hook(q, k, k[..., :512], o, kb, kb[..., :512], qo, qo, qo, None, True, qo, 2)
    assert ran is False and hook.reasons == {"kv dtype fp8_e5m2 unsupported": 1}


# ----------------------------------------------------------------------------- per-rank records


def _rank(tp_rank, tp_size, route="hook", verify=None, written_at=None, **kw):
    return {
        "rank": f"tp{tp_rank}",
        "tp_rank": tp_rank,
        "tp_size": tp_size,
        "pp_rank": 0,
        "dp_rank": None,
        "pid": 1000 + tp_rank,
        "started_at": 1.0,
        "written_at": written_at or time.time(),
        "verify_kernel": "bundled" if route == "hook" else "stock",
        "bundle_sha": "a" * 64,
        "route": route,
        "reason": "r",
        "backends": {"target": {"verify": verify or {}}},
        "defrag_requested": False,
        "defrag_applied": False,
        "defrag_note": None,
        **kw,
    }


def test_active_json_merges_every_rank_instead_of_keeping_the_last_writer(tmp_path):
    from sglang_verify_plugin.config import write_rank

    cap_ok = {"captured": {"1": {"kernel": "bundled"}, "4": {"kernel": "bundled"}}, "eager": {"routed": 5}}
    cap_bad = {
        "captured": {"1": {"kernel": "bundled"}, "4": {"kernel": "sglang", "reasons": {"logit cap": 61}}},
        "eager": {"routed": 2, "declined": 3, "reasons": {"kv dtype fp8_e5m2 unsupported": 3}},
    }
    write_rank(_rank(0, 4, verify=cap_ok), tmp_path)
    write_rank(_rank(1, 4, verify=cap_bad), tmp_path)
    write_rank(_rank(2, 4, route="declined", reason="bundled kernel declined: x"), tmp_path)
    active = _active(tmp_path)
    assert active["ranks_total"] == 3 and sorted(active["ranks"]) == ["tp0", "tp1", "tp2"]
    assert active["ranks_missing"] == ["tp3"] and active["all_ranks_active"] is False
    assert list(active["ranks_inactive"]) == ["tp2"] and active["verify_kernel"] == "mixed"
    assert active["eager_routed"] == 7 and active["eager_declined"] == 3
    assert active["declined_reasons"] == {"kv dtype fp8_e5m2 unsupported": 3}
    assert active["captured_not_bundled"] == [{"rank": "tp1", "bs": 4, "reasons": {"logit cap": 61}}]
    assert active["captured_batch_sizes"]["tp0"] == [1, 4]
    # The last writer (tp3, all fine) does not erase what tp1 and tp2 reported.
    write_rank(_rank(3, 4, verify=cap_ok), tmp_path)
    active = _active(tmp_path)
    assert active["ranks_missing"] == [] and list(active["ranks_inactive"]) == ["tp2"]
    assert active["captured_not_bundled"][0]["rank"] == "tp1" and active["all_ranks_active"] is False


def test_eight_processes_writing_at_once_all_end_up_in_active_json(tmp_path):
    code = textwrap.dedent(
        """
        import sys, time
        from sglang_verify_plugin import config
        r = int(sys.argv[1])
        config.set_rank(r, 8)
        cfg = config.VerifyConfig("bundled", "b" * 64, False, "test")
        for _ in range(5):
            config.record_active(cfg, route="hook")
        """
    )
    env = {
        **os.environ,
        "ORCHESTRATOR_VERIFY_CONFIG": str(tmp_path / "verify_backend.json"),
        "PYTHONPATH": str(KERNELS),
    }
    procs = [subprocess.Popen([sys.executable, "-c", code, str(r)], env=env, cwd=str(KERNELS)) for r in range(8)]
    assert [p.wait(timeout=120) for p in procs] == [0] * 8
    active = _active(tmp_path)
    assert sorted(active["ranks"]) == [f"tp{r}" for r in range(8)]
    assert active["all_ranks_active"] is True and active["verify_kernel"] == "bundled" and active["pid"] is None
    assert len(set(active["pids"])) == 8


def test_each_captured_batch_size_records_which_kernel_the_graph_replays(sglang_ready, tmp_path, monkeypatch):
    """Under capture the hook's decision is baked into the graph: it is recorded per batch size."""
    from test_plugin_cpu import RecordingKernel

    import sglang_verify_plugin.verify_hook as vh
    from sglang_verify_plugin.config import flush

    plugin = _register_with_config(tmp_path, monkeypatch)
    try:
        vb1, vb3 = _batch(prefix_lens=(7,)), _batch(prefix_lens=(4, 6, 2))
        for vb, supported in ((vb1, True), (vb3, False)):
            vb.backend.bundled_verify._kernel = RecordingKernel(supported=supported)
            vb.backend.extend_attention_fwd = SGLangKernel()
        monkeypatch.setattr(vh, "_capturing", lambda: True)
        vb1.backend.forward_extend(vb1.q, vb1.k, vb1.v, vb1.layer, vb1.forward_batch)
        vb3.backend.forward_extend(vb3.q, vb3.k, vb3.v, vb3.layer, vb3.forward_batch)
        monkeypatch.setattr(vh, "_capturing", lambda: False)
        vb1.backend.forward_extend(vb1.q, vb1.k, vb1.v, vb1.layer, vb1.forward_batch)
        assert vb1.backend.bundled_verify.stats()["captured"] == {
            "1": {"kernel": "bundled", "bundled_calls": 1, "declined_calls": 0, "reasons": {}}
        }
        assert vb3.backend.bundled_verify.stats()["captured"]["3"]["kernel"] == "sglang"
        # The process record shows the last target backend built (vb3: bs 3 on SGLang's kernel).
        flush()
        active = _active(tmp_path)
        assert active["captured_not_bundled"] == [
            {"rank": active["ranks_active"][0], "bs": 3, "reasons": {"mla_verify.supports() declined the shape": 1}}
        ]
    finally:
        plugin.unregister()


def test_the_draft_runners_backend_is_recorded_under_its_own_role(sglang_ready, tmp_path, monkeypatch):
    from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS

    plugin = _register_with_config(tmp_path, monkeypatch)
    try:
        vb = _batch()
        vb.runner.is_draft_worker = True
        ATTENTION_BACKENDS["triton"](vb.runner)
        (rank,) = _active(tmp_path)["ranks"].values()
        assert set(rank["backends"]) == {"target", "draft"}
        assert rank["verify_kernel"] == "bundled" and rank["route"] == "hook", "the target's fields stay"
    finally:
        plugin.unregister()


# ----------------------------------------------------------------------------- HF kernels


HF_FIRST = """
import sys
import kernels
from kernels import get_kernel
assert "site-packages" in kernels.__file__, kernels.__file__
import sglang_verify_plugin, mla_verify, verify_tools, cutover_agent, kv_defrag
from sglang_verify_plugin import config
from mla_verify import _build
assert sys.modules["kernels"] is kernels
print("OK", kernels.__file__)
"""

PLUGIN_FIRST = """
import sys
import sglang_verify_plugin, mla_verify, verify_tools, cutover_agent, kv_defrag
from sglang_verify_plugin import config
from mla_verify import _build
from kernels import get_kernel, load_kernel
import kernels
assert "site-packages" in kernels.__file__, kernels.__file__
print("OK", kernels.__file__)
"""


@pytest.mark.parametrize("code", [HF_FIRST, PLUGIN_FIRST], ids=["hf-kernels-first", "plugin-first"])
def test_hugging_face_kernels_and_the_bundle_import_in_either_order(code):
    """SGLang imports HF ``kernels`` (flash_attention_v3); the bundle must never shadow it, even
    with the checkout root (which holds the kernels/ folder) first on sys.path."""
    try:
        import kernels  # noqa: F401
    except ImportError as exc:
        pytest.skip(f"Hugging Face kernels not installed ({exc}): see tests/integration/requirements-sglang.txt")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(KERNELS)])}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env, cwd=str(REPO)
    )
    assert proc.returncode == 0 and proc.stdout.startswith("OK"), proc.stdout + proc.stderr


def test_the_loader_registers_after_hugging_face_kernels_was_imported(sglang_ready, tmp_path, monkeypatch):
    import kernels as hf_kernels

    loader = load_service_loader("mla_verify_loader_after_hf")
    root = tmp_path / "root"
    (root / "bundles").mkdir(parents=True)
    os.symlink(KERNELS, root / "bundles" / ("c" * 64))
    os.symlink("bundles/" + "c" * 64, root / "current")
    monkeypatch.setenv("ORCHESTRATOR_VERIFY_ROOT", str(root))
    monkeypatch.setenv("ORCHESTRATOR_VERIFY_CONFIG", str(root / "verify_backend.json"))
    import sglang_verify_plugin as plugin

    try:
        assert loader.load() is True
        assert sys.modules["kernels"] is hf_kernels and callable(hf_kernels.get_kernel)
    finally:
        plugin.unregister()


# ----------------------------------------------------------------------------- phase 0 / probe


def test_phase0s_build_step_says_why_it_built_no_library_on_a_cpu_torch():
    """The build step builds the loadable library only where torch has CUDA; here it says why not
    (the service would then decline, named, and phase 3's probe gate library_loadable fails)."""
    import torch

    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not installed: the build step is blocked before the library")
    if torch.version.cuda:
        pytest.skip("CUDA torch here: the library would really be built (covered on the GPU machine)")
    proc = subprocess.run(
        [sys.executable, "-m", "verify_tools.build_check", "--arch", "sm_90a", "--json"],
        cwd=str(KERNELS),
        capture_output=True,
        text=True,
        timeout=900,
    )
    doc = json.loads(proc.stdout)
    assert proc.returncode == 0 and doc["summary"]["spill_bytes"] == 0
    lib = doc["library"]
    assert lib["built"] is False and lib["loadable"] is False and lib["sha256"] is None
    assert "has no CUDA" in lib["skipped"] and doc["summary"]["library_built"] is False
    dsa = doc["dsa_library"]  # the DSA route's library: built beside it, or skipped for the same reason
    assert dsa["built"] is False and dsa["loadable"] is False and "has no CUDA" in dsa["skipped"]
    assert doc["summary"]["dsa_library_built"] is False and doc["summary"]["dsa_library_loadable"] is False


def test_the_probe_reports_whether_the_prebuilt_library_loads_in_the_service_python():
    import torch

    from cutover_agent.probe import library_check

    doc = library_check()
    if not torch.cuda.is_available():
        assert doc["loadable"] is None and "no CUDA device" in doc["reason"]
    else:
        assert doc["loadable"] in (True, False) and (doc["loadable"] or doc["reason"])

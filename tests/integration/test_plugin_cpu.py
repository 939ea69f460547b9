"""The SGLang plugin against the real sglang 0.5.23 package, on CPU.

The backend is built by SGLang's registry with SGLang's MLA mock runner and driven through
SGLang's own ``init_forward_metadata`` and ``forward_extend``. The GPU kernels are replaced
by RECORDING STAND-INS (CPU tests only): :class:`RecordingKernel` for
``mla_verify`` and :class:`RecordingSGLangKernel` for SGLang's Triton
``extend_attention_fwd``; they record what they receive and write a marker into ``o``.
"""

from __future__ import annotations

import json
import os

import pytest

from tests.support.paths import load_service_loader

pytestmark = pytest.mark.sglang


class RecordingKernel:
    """RECORDING STAND-IN for mla_verify (no CUDA here): checks nothing, records all."""

    def __init__(self, supported: bool = True, fill: float = 0.25) -> None:
        self.supported, self.fill = supported, fill
        self.calls: list[tuple[tuple, dict]] = []
        self.saved_draft_rows = None
        self.batch = None

    def supports(self, *args, **kwargs) -> bool:
        return self.supported

    def mla_verify_fwd(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        if self.batch is not None:  # what the pool holds at the draft slots when we run
            k_buffer = args[4]
            self.saved_draft_rows = k_buffer[self.batch.forward_batch.out_cache_loc].clone()
        args[3].fill_(self.fill)
        return args[3]


class RecordingSGLangKernel:
    """RECORDING STAND-IN for SGLang's Triton extend_attention_fwd (no CUDA here)."""

    def __init__(self, fill: float = -1.0) -> None:
        self.fill = fill
        self.calls: list[tuple[tuple, dict]] = []

    def __call__(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        args[3].fill_(self.fill)


def _batch(prefix_lens=(5, 9), n=3, heads=4, **kw):
    from sglang_verify_batch import build_verify_batch

    vb = build_verify_batch(prefix_lens, n, heads, seed=7, sm_scale=0.1352, **kw)
    vb.backend.init_forward_metadata(vb.forward_batch)
    return vb


def _wire(vb, kernel: RecordingKernel):
    kernel.batch = vb
    vb.backend.bundled_verify._kernel = kernel
    sglang_kernel = RecordingSGLangKernel()
    vb.backend.extend_attention_fwd = sglang_kernel
    return sglang_kernel


def test_the_factory_under_triton_builds_the_bundled_subclass_with_the_verify_hook(registered):
    from sglang.srt.layers.attention.triton_backend import TritonAttnBackend

    from sglang_verify_plugin.backend import BundledVerifyTritonBackend

    vb = _batch()
    assert type(vb.backend) is BundledVerifyTritonBackend and isinstance(vb.backend, TritonAttnBackend)
    assert vb.backend.bundled_verify_route == "hook"
    assert vb.backend.use_verify_shared_kv is True and vb.backend.use_verify_splitkv is False


def test_config_stock_makes_the_factory_build_sglangs_own_backend(registered):
    from sglang.srt.layers.attention.triton_backend import TritonAttnBackend

    from sglang_verify_plugin.config import VerifyConfig

    registered["config"] = VerifyConfig("stock", None, False, "test: stock")
    vb = _batch()
    assert type(vb.backend) is TritonAttnBackend


def test_kill_switch_env_wins_over_a_bundled_config_file(sglang_ready, tmp_path, monkeypatch):
    from sglang.srt.layers.attention.triton_backend import TritonAttnBackend

    import sglang_verify_plugin as plugin

    cfg = tmp_path / "verify_backend.json"
    cfg.write_text(json.dumps({"verify_kernel": "bundled", "bundle_sha": "e" * 64, "defrag": False}))
    monkeypatch.setenv("ORCHESTRATOR_VERIFY_CONFIG", str(cfg))
    assert plugin.register()  # the real config reader, read when the backend is built
    try:
        assert type(_batch().backend).__name__ == "BundledVerifyTritonBackend"
        active = json.loads((tmp_path / "active.json").read_text())
        assert (active["verify_kernel"], active["bundle_sha"], active["route"]) == ("bundled", "e" * 64, "hook")
        assert active["pid"] == os.getpid()
        monkeypatch.setenv("ORCHESTRATOR_VERIFY_DISABLE", "1")
        assert type(_batch().backend) is TritonAttnBackend
        active = json.loads((tmp_path / "active.json").read_text())
        assert active["verify_kernel"] == "stock" and "ORCHESTRATOR_VERIFY_DISABLE" in active["reason"]
    finally:
        plugin.unregister()


def test_sglang_forward_extend_hands_the_verify_metadata_to_the_bundled_kernel(registered):
    import torch

    vb = _batch(prefix_lens=(5, 9, 0), n=3, heads=4)
    kernel = RecordingKernel()
    sglang_kernel = _wire(vb, kernel)
    o = vb.backend.forward_extend(vb.q, vb.k, vb.v, vb.layer, vb.forward_batch)

    assert len(kernel.calls) == 1 and sglang_kernel.calls == [], "verify must not reach SGLang's kernel"
    args, kwargs = kernel.calls[0]
    (
        q,
        k,
        v,
        out,
        k_buffer,
        v_buffer,
        qo_indptr,
        kv_indptr,
        kv_indices,
        custom_mask,
        is_causal,
        mask_indptr,
        max_len,
    ) = args
    pool = vb.runner.token_to_kv_pool
    T, H, n = 9, 4, 3
    assert tuple(q.shape) == (T, H, 576) and q.data_ptr() == vb.q.data_ptr()
    assert tuple(k.shape) == (T, 1, 576) and tuple(v.shape) == (T, 1, 512)
    assert tuple(out.shape) == (T, H, 512)
    assert k_buffer.data_ptr() == pool.get_key_buffer(0).data_ptr()
    assert v_buffer.data_ptr() == k_buffer.data_ptr() and v_buffer.stride(0) == 576 and v_buffer.shape[-1] == 512
    assert qo_indptr.tolist() == [0, 3, 6, 9]
    assert kv_indptr.tolist() == [0, 5, 14, 14], "prefix only: the draft tokens are not in kv_indptr"
    for b in range(3):
        got = kv_indices[kv_indptr[b] : kv_indptr[b + 1]]
        assert torch.equal(got, vb.prefix_slots(b)), f"request {b}: kv_indices are not its prefix slots"
    assert custom_mask is vb.forward_batch.spec_info.custom_mask
    assert mask_indptr.tolist() == [0, 3 * (5 + 3), 3 * (5 + 3) + 3 * (9 + 3), 3 * 8 + 3 * 12 + 3 * 3]
    assert (is_causal, max_len) == (True, n)
    assert kwargs == {"k_scale": 1.0, "v_scale": 1.0, "sm_scale": pytest.approx(0.1352), "logit_cap": 0.0}
    # SGLang saved the draft KV into its cache slots before the kernel ran.
    assert torch.equal(kernel.saved_draft_rows, vb.k)
    assert o.shape == (T, H * 512) and bool((o == 0.25).all()), "forward_extend returns what the kernel wrote"
    assert vb.backend.bundled_verify.bundled_calls == 1


def test_a_shape_the_kernel_does_not_support_goes_to_sglangs_kernel_with_the_same_metadata(registered):
    vb = _batch()
    kernel = RecordingKernel(supported=False)
    sglang_kernel = _wire(vb, kernel)
    o = vb.backend.forward_extend(vb.q, vb.k, vb.v, vb.layer, vb.forward_batch)
    assert kernel.calls == [] and len(sglang_kernel.calls) == 1
    args, kwargs = sglang_kernel.calls[0]
    md = vb.backend.forward_metadata
    assert args[6] is md.qo_indptr and args[7] is md.kv_indptr and args[8] is md.kv_indices
    assert kwargs["page_size"] == 1 and kwargs["sliding_window_size"] == -1
    assert bool((o == -1.0).all())
    assert vb.backend.bundled_verify.reasons == {"mla_verify.supports() declined the shape": 1}


def test_non_absorbed_head_dims_are_declined_before_asking_the_kernel(registered):
    vb = _batch(kv_lora_rank=32, qk_rope_head_dim=0)  # SGLang kit's tiny MLA: head_dim 32
    kernel = RecordingKernel(supported=True)
    sglang_kernel = _wire(vb, kernel)
    vb.backend.forward_extend(vb.q, vb.k, vb.v, vb.layer, vb.forward_batch)
    assert kernel.calls == [] and len(sglang_kernel.calls) == 1
    (reason,) = vb.backend.bundled_verify.reasons
    assert reason.startswith("not absorbed MLA 576/512")


@pytest.mark.parametrize(
    "kw, reason",
    [
        ({"sliding_window_size": 128}, "sliding window"),
        ({"sinks": object()}, "attention sinks"),
        ({"logit_cap": 30.0}, "logit cap"),
        ({"some_future_flag": True}, "unknown keyword(s) ['some_future_flag']"),
    ],
)
def test_features_the_kernel_lacks_fall_back(registered, kw, reason):
    from sglang_verify_plugin.verify_hook import BundledVerify

    vb = _batch()
    kernel = RecordingKernel()
    hook = BundledVerify(kernel_loader=lambda: kernel)
    md = vb.backend.forward_metadata
    o = vb.q.new_empty(6, 4, 512)
    pool = vb.runner.token_to_kv_pool
    ran = hook(
        vb.q.view(6, 4, 576),
        vb.k,
        vb.v,
        o,
        pool.get_key_buffer(0),
        pool.get_value_buffer(0),
        md.qo_indptr,
        md.kv_indptr,
        md.kv_indices,
        md.custom_mask,
        True,
        md.mask_indptr,
        3,
        1.0,
        1.0,
        0.1,
        **{"logit_cap": 0.0, **kw},
    )
    assert ran is False and kernel.calls == [] and hook.reasons == {reason: 1}


def test_a_kernel_that_cannot_be_imported_falls_back_and_says_why(registered):
    from sglang_verify_plugin.verify_hook import BundledVerify

    def broken():
        raise ImportError("libcuda.so.1: cannot open shared object file")

    vb = _batch()
    hook = BundledVerify(kernel_loader=broken)
    vb.backend.install_bundled_verify(hook)
    sglang_kernel = RecordingSGLangKernel()
    vb.backend.extend_attention_fwd = sglang_kernel
    vb.backend.forward_extend(vb.q, vb.k, vb.v, vb.layer, vb.forward_batch)
    assert len(sglang_kernel.calls) == 1
    assert "libcuda" in hook.kernel_error
    # Found when the backend was built (preflight), so every call is declined with the import error.
    reason = "kernel unavailable: ImportError: libcuda.so.1: cannot open shared object file"
    assert hook.static_decline == reason and hook.reasons == {reason: 1}
    assert hook.stats()["eager"] == {"routed": 0, "declined": 1, "reasons": {reason: 1}}


def test_a_kernel_argument_error_falls_back_instead_of_failing_the_request(registered):
    vb = _batch()
    kernel = RecordingKernel()

    def refuse(*a, **k):
        raise ValueError("workspace: needs 10 fp32 elements, got 4")

    kernel.mla_verify_fwd = refuse
    sglang_kernel = _wire(vb, kernel)
    vb.backend.forward_extend(vb.q, vb.k, vb.v, vb.layer, vb.forward_batch)
    assert len(sglang_kernel.calls) == 1
    assert list(vb.backend.bundled_verify.reasons) == ["kernel refused: workspace: needs 10 fp32 elements, got 4"]


def test_non_verify_extend_never_reaches_the_bundled_kernel(registered):
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    vb = _batch()
    kernel = RecordingKernel()
    sglang_kernel = _wire(vb, kernel)
    fb = vb.forward_batch
    fb.forward_mode = ForwardMode.EXTEND
    fb.extend_seq_lens_cpu = [3, 3]
    vb.backend.forward_extend(vb.q, vb.k, vb.v, vb.layer, fb)
    assert kernel.calls == [] and len(sglang_kernel.calls) == 1


def test_the_forward_extend_route_for_releases_without_the_hook(registered):
    """Route B (older SGLang): forced on 0.5.23, it must map the same metadata the same way."""
    import torch

    vb = _batch(prefix_lens=(4, 6), n=2, heads=4)
    kernel = RecordingKernel()
    vb.backend.install_bundled_verify(route="forward_extend")
    vb.backend.use_verify_shared_kv = False  # as on a release without the hook
    sglang_kernel = _wire(vb, kernel)
    o = vb.backend.forward_extend(vb.q, vb.k, vb.v, vb.layer, vb.forward_batch)
    assert len(kernel.calls) == 1 and sglang_kernel.calls == []
    args, kwargs = kernel.calls[0]
    assert args[7].tolist() == [0, 4, 10] and args[6].tolist() == [0, 2, 4] and args[12] == 2
    assert torch.equal(kernel.saved_draft_rows, vb.k)
    assert bool((o == 0.25).all())


def test_cuda_graph_state_allocates_the_workspace_before_any_forward(registered):
    vb = _batch()
    seen = {}

    class Kernel(RecordingKernel):
        def make_workspace(self, **sizes):
            seen.update(sizes)
            return "workspace-buffer"

    vb.backend.bundled_verify._kernel = Kernel()
    vb.backend.init_cuda_graph_state(max_bs=2, max_num_tokens=6)
    assert vb.backend.bundled_verify.workspace == "workspace-buffer"
    assert seen["max_bs"] == 2 and seen["tokens_per_req"] == 3 and seen["num_heads"] == 4
    assert seen["kv_indices_numel"] == vb.backend.cuda_graph_kv_indices.numel()


def test_a_non_mla_model_keeps_sglangs_verify_untouched(registered):
    vb = _batch()
    backend = vb.backend
    backend.use_mla = False
    backend.use_verify_shared_kv = False
    sentinel = object()
    backend.verify_shared_kv_fwd = sentinel
    backend.install_bundled_verify()
    assert backend.bundled_verify_route == "none"
    assert backend.use_verify_shared_kv is False and backend.verify_shared_kv_fwd is sentinel


def test_sglangs_own_verify_kernel_stays_the_fallback_where_sglang_enabled_it(registered):
    vb = _batch()
    backend = vb.backend
    calls = []

    def amd_verify(*a, **k):
        calls.append(k["max_bs"])
        return True

    backend.use_verify_shared_kv, backend.verify_shared_kv_fwd = True, amd_verify
    backend.install_bundled_verify()
    backend.bundled_verify._kernel = RecordingKernel(supported=False)
    backend.forward_extend(vb.q, vb.k, vb.v, vb.layer, vb.forward_batch)
    assert calls == [backend.req_to_token_pool.size]


def test_registration_through_sglangs_entry_point_loader(sglang_ready, tmp_path, monkeypatch):
    """pip-install the service package, then sglang.srt.plugins.load_plugins() registers us."""
    import importlib
    import subprocess
    import sys

    import sglang.srt.plugins as plugins
    from sglang.srt.layers.attention import attention_registry

    import sglang_verify_plugin as plugin

    root = tmp_path / "root"
    sha = "d" * 64
    (root / "bundles").mkdir(parents=True)
    # The active bundle is this checkout's kernels/ (the unpacked bundle is that tree), as
    # `current` would point at it.
    from pathlib import Path

    os.symlink(Path(plugin.__file__).resolve().parents[1], root / "bundles" / sha)
    os.symlink(f"bundles/{sha}", root / "current")
    (root / "verify_backend.json").write_text(json.dumps({"verify_kernel": "bundled", "bundle_sha": sha}))
    site = tmp_path / "site"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cutover_agent",
            "stage",
            "--root",
            str(root),
            "--service-python",
            sys.executable,
            "--target",
            str(site),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(plugin.__file__).resolve().parents[1],
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delenv("ORCHESTRATOR_VERIFY_CONFIG", raising=False)
    monkeypatch.delenv("ORCHESTRATOR_VERIFY_ROOT", raising=False)
    monkeypatch.delenv("SGLANG_PLUGINS", raising=False)
    importlib.invalidate_caches()
    stock = attention_registry.ATTENTION_BACKENDS["triton"]
    monkeypatch.setattr(plugins, "_plugins_loaded", False)
    try:
        plugins.load_plugins()
        factory = attention_registry.ATTENTION_BACKENDS["triton"]
        assert factory is not stock and factory._orchestrator_stock_factory is stock
        # The loader found the root from the baked root.json and pointed the config at it.
        assert os.environ["ORCHESTRATOR_VERIFY_CONFIG"] == str(root / "verify_backend.json")
        from sglang_verify_batch import build_verify_batch

        assert type(build_verify_batch((3,), 2, 4).backend).__name__ == "BundledVerifyTritonBackend"
    finally:
        plugin.unregister()
        os.environ.pop("ORCHESTRATOR_VERIFY_CONFIG", None)
        sys.modules.pop("mla_verify_loader", None)
    assert attention_registry.ATTENTION_BACKENDS["triton"] is stock


def test_the_loader_refuses_a_foreign_kernels_package(sglang_ready, tmp_path, monkeypatch):
    """A bundle whose `kernels` differs from the one already imported is not mixed in."""
    loader = load_service_loader("mla_verify_loader_under_test")
    root = tmp_path / "root"
    (root / "bundles" / ("c" * 64) / "sglang_verify_plugin").mkdir(parents=True)
    os.symlink("bundles/" + "c" * 64, root / "current")
    monkeypatch.setenv("ORCHESTRATOR_VERIFY_ROOT", str(root))
    monkeypatch.setenv("ORCHESTRATOR_VERIFY_CONFIG", str(root / "verify_backend.json"))
    assert loader.load() is False


def test_the_loader_without_current_leaves_sglang_stock(sglang_ready, tmp_path, monkeypatch):
    loader = load_service_loader("mla_verify_loader_under_test2")
    monkeypatch.setenv("ORCHESTRATOR_VERIFY_ROOT", str(tmp_path))
    monkeypatch.setenv("ORCHESTRATOR_VERIFY_CONFIG", str(tmp_path / "verify_backend.json"))
    assert loader.load() is False


def test_a_kernel_that_fails_at_run_time_is_disabled_and_active_json_stops_claiming_it(
    sglang_ready, tmp_path, monkeypatch
):
    import sglang_verify_plugin as plugin

    cfg = tmp_path / "verify_backend.json"
    cfg.write_text(json.dumps({"verify_kernel": "bundled", "bundle_sha": "e" * 64}))
    monkeypatch.setenv("ORCHESTRATOR_VERIFY_CONFIG", str(cfg))
    assert plugin.register()
    try:
        vb = _batch()
        kernel = RecordingKernel()

        def broken(*a, **k):
            raise RuntimeError("CUDA error: no kernel image is available for execution on the device")

        kernel.mla_verify_fwd = broken
        sglang_kernel = _wire(vb, kernel)
        assert json.loads((tmp_path / "active.json").read_text())["verify_kernel"] == "bundled"
        for _ in range(2):
            vb.backend.forward_extend(vb.q, vb.k, vb.v, vb.layer, vb.forward_batch)
        assert len(sglang_kernel.calls) == 2, "both calls answered by SGLang's kernel"
        assert vb.backend.bundled_verify.reasons == {"kernel unavailable": 2}
        active = json.loads((tmp_path / "active.json").read_text())
        assert (active["verify_kernel"], active["route"]) == ("stock", "disabled")
        assert "no kernel image" in active["reason"]
    finally:
        plugin.unregister()

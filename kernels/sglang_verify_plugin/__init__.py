"""SGLang backend plugin: the bundled target-verify kernels inside SGLang's attention backends.

``register()`` replaces two factories in SGLang's ``ATTENTION_BACKENDS``, keeping their names
(SGLang compares them in many places), one route per model family:

- ``"triton"`` (dense MLA: DeepSeek-V3/R1, Kimi K2) -> the bundled ``mla_verify`` kernel;
- ``"dsa"`` (DeepSeek Sparse Attention: GLM-5, DeepSeek-V3.2) -> the bundled ``dsa_verify``
  kernel (:mod:`sglang_verify_plugin.dsa_backend`). Not installed (logged) when this SGLang has
  no importable dsa backend; the dense route is unaffected.

Each factory reads the config (``verify_backend.json`` / ``ORCHESTRATOR_VERIFY_DISABLE``) each
time a process builds its backend, i.e. at service start, and returns:

- :class:`~sglang_verify_plugin.backend.BundledVerifyTritonBackend` when the config says
  ``"bundled"`` and its ``model_family`` is ``dense_mla`` (or absent), resp. the dsa subclass
  when it says ``"bundled"`` and ``model_family: dsa``;
- SGLang's own backend (the stock factory) otherwise: the kill switch, without uninstalling;
  the route the cut-over did not enable records ``route: stock`` with the reason.

``register()`` also puts the process in prebuilt-only mode (``MLA_VERIFY_PREBUILT_ONLY=1``):
the kernel loads the library phase 0 built and hash-recorded, and never compiles (no nvcc,
ninja, writable HOME or build lock in a service); a missing or mismatched library declines
every verify call with that reason, recorded in ``active.json``.

Each process records what it built and ran in ``<root>/active.d/<rank>.json`` (per role:
target, draft; per captured batch size and for eager calls, bundled or declined with the
reasons) and re-merges ``active.json`` from all of them (config.py).

It is called by the service package's entry point (group ``sglang.srt.plugins``), in every
SGLang process, including the spawned scheduler and TP workers. Importing this package
imports neither SGLang nor torch.

When the config says ``"defrag": true`` (and the kill switch is off), ``register()`` also wraps
``Scheduler.get_next_batch_to_run`` with the KV defragmenter hook
(:mod:`sglang_verify_plugin.defrag_hook`); it attaches to each scheduler at its first step and
reports in ``active.json`` (``defrag_applied`` true only once attached to a real scheduler).
Optional tuning: ``"defrag_options": {...}`` in the config (see ``DefragSettings``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

from sglang_verify_plugin.config import VerifyConfig, load_config, record_active, set_defrag_status, set_rank

log = logging.getLogger("sglang_verify_plugin")

BACKEND_NAME = "triton"
PREBUILT_ENV = "MLA_VERIFY_PREBUILT_ONLY"  # = mla_verify._build.PREBUILT_ENV (not imported here)
_STOCK_ATTR = "_orchestrator_stock_factory"


def make_factory(
    stock: Callable[[Any], Any], config_loader: Callable[[], VerifyConfig] = load_config
) -> Callable[[Any], Any]:
    """The factory registered under "triton": bundled subclass or stock, per the config."""

    def create_triton_backend_with_bundled_verify(runner: Any) -> Any:
        from sglang_verify_plugin.backend import runner_rank, runner_role

        cfg = config_loader()
        role = runner_role(runner)
        set_rank(**runner_rank(runner))
        reason = cfg.reason
        if cfg.bundled and cfg.model_family not in (None, "dense_mla"):
            reason = (
                f"{cfg.reason}, model_family={cfg.model_family}: the bundle was cut over for the "
                f"{cfg.model_family} route, not the dense (triton) one"
            )
        if reason != cfg.reason or not cfg.bundled or getattr(runner.model_config, "is_encoder_decoder", False):
            log.info("verify kernel: stock Triton (%s)", reason)
            backend = stock(runner)
            record_active(VerifyConfig("stock", cfg.bundle_sha, cfg.defrag, reason), role=role, route="stock")
            return backend
        from sglang_verify_plugin.backend import BundledVerifyTritonBackend

        log.info("verify kernel: bundled %s (%s)", (cfg.bundle_sha or "?")[:12], cfg.reason)
        backend = BundledVerifyTritonBackend(runner)
        backend.record_active(cfg, role=role)
        return backend

    setattr(create_triton_backend_with_bundled_verify, _STOCK_ATTR, stock)
    return create_triton_backend_with_bundled_verify


def register(config_loader: Callable[[], VerifyConfig] = load_config) -> bool:
    """Install the factory under "triton" (idempotent). False when SGLang lacks the registry."""
    try:
        from sglang.srt.layers.attention import attention_registry
    except ImportError as exc:
        log.error("sglang attention registry not importable; plugin not registered: %s", exc)
        return False
    backends = getattr(attention_registry, "ATTENTION_BACKENDS", None)
    if not isinstance(backends, dict) or BACKEND_NAME not in backends:
        log.error("sglang has no ATTENTION_BACKENDS[%r]; plugin not registered", BACKEND_NAME)
        return False
    # A service process never compiles: the kernel loads only the library phase 0 built.
    os.environ[PREBUILT_ENV] = "1"
    current = backends[BACKEND_NAME]
    stock = getattr(current, _STOCK_ATTR, current)
    backends[BACKEND_NAME] = make_factory(stock, config_loader)
    from sglang_verify_plugin.dsa_backend import register_dsa

    why_not = register_dsa(config_loader)
    if why_not is not None:
        log.error("DSA verify route not registered (dense route unaffected): %s", why_not)
    install_defrag(config_loader)
    return True


def install_defrag(config_loader: Callable[[], VerifyConfig] = load_config) -> bool:
    """Wrap SGLang's scheduler with the KV defrag hook when the config asks for it.

    True when the wrapper is installed. Any failure (an SGLang without the scheduler method,
    bad ``defrag_options``) is logged and recorded for ``active.json``; serving is unaffected.
    """
    cfg = config_loader()
    if not cfg.defrag:
        return False
    try:
        from sglang_verify_plugin import defrag_hook

        settings = defrag_hook.DefragSettings.from_mapping(cfg.extra.get("defrag_options"))
        defrag_hook.install(settings)
    except Exception as exc:  # noqa: BLE001 - the service must start without defrag
        log.error("KV defrag hook not installed: %s", exc)
        set_defrag_status(defrag_applied=False, defrag_note=f"defrag hook not installed: {type(exc).__name__}: {exc}")
        return False
    return True


def unregister() -> bool:
    """Put SGLang's own "triton" factory back (tests; a live service just restarts)."""
    from sglang.srt.layers.attention import attention_registry

    current = attention_registry.ATTENTION_BACKENDS.get(BACKEND_NAME)
    try:
        from sglang_verify_plugin.defrag_hook import uninstall

        uninstall()
    except ImportError:
        pass
    from sglang_verify_plugin.dsa_backend import unregister_dsa

    unregister_dsa()
    stock = getattr(current, _STOCK_ATTR, None)
    if stock is None:
        return False
    attention_registry.ATTENTION_BACKENDS[BACKEND_NAME] = stock
    return True

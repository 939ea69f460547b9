"""``python -m orchestrator`` runs the CLI; :func:`main` is also meant as the console script's entry.

Two things keep a cold start short (``orchestrator status`` is run often, by people and scripts):

- a plain ``orchestrator status`` is answered without importing Typer (:mod:`orchestrator.fastpath`);
  everything else, and every error, goes to :func:`orchestrator.cli.main`;
- third-party pydantic plugins are not looked for (:func:`skip_pydantic_plugin_discovery`);
- the cyclic garbage collector is off while the fast path imports and builds its models (a
  start makes many objects and no cyclic garbage worth a collection), and a fast-path process
  ends with :func:`os._exit` once stdout and stderr are flushed (:func:`_exit_now`): tearing
  down the interpreter (every module and pydantic's validators) was about an eighth of it.
"""

from __future__ import annotations

import atexit
import gc
import os
import signal
import sys
import types
from typing import Any

_LOADER = "pydantic.plugin._loader"


class _NoPluginsLoader(types.ModuleType):
    """Stands in for ``pydantic.plugin._loader``: no plugins; any other name from the real module."""

    def get_plugins(self) -> tuple[()]:
        return ()

    def __getattr__(self, name: str) -> Any:  # a name a later pydantic may add: the real one
        if name.startswith("__"):  # the import system probes __path__ etc.: not a package
            raise AttributeError(name)
        import importlib.util
        from pathlib import Path

        import pydantic.plugin

        path = Path(pydantic.plugin.__file__).with_name("_loader.py")
        spec = importlib.util.spec_from_file_location(f"{_LOADER}.real", path)
        if spec is None or spec.loader is None:
            raise AttributeError(name)
        real = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(real)
        return getattr(real, name)


def skip_pydantic_plugin_discovery() -> bool:
    """Tell pydantic, before it builds its first model, that there are no plugins; True if done.

    The orchestrator's models use no pydantic plugin, but pydantic looks for plugins (the entry
    points of every installed distribution) when it builds its first model, which imports
    ``importlib.metadata`` and scans them: about a sixth of the cold start of ``status``. This
    is like ``PYDANTIC_DISABLE_PLUGINS=__all__`` without the scan's import, and without putting
    that variable into the environment of the commands the orchestrator runs. Not done if
    pydantic already looked, if ``PYDANTIC_DISABLE_PLUGINS`` is set (pydantic then decides), or
    if ``ORCHESTRATOR_PYDANTIC_PLUGINS=1`` (load them as pydantic normally does)."""
    if _LOADER in sys.modules or "PYDANTIC_DISABLE_PLUGINS" in os.environ:
        return False
    if os.environ.get("ORCHESTRATOR_PYDANTIC_PLUGINS") == "1":
        return False
    sys.modules[_LOADER] = _NoPluginsLoader(_LOADER, "no pydantic plugins in the orchestrator CLI")
    return True


def _sigterm(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt  # as orchestrator.cli.main does: SIGTERM is reported like Ctrl-C (130)


def _is_process_entry(argv: list[str] | None) -> bool:
    """True when :func:`main` runs a whole process: ``python -m orchestrator`` or the console
    script (its ``__main__`` imported this ``main``), with the process's own arguments. Not when
    it is called with an argument list, or run in a process started for something else (a test,
    ``runpy``): that process still has work to do after the command."""
    return argv is None and getattr(sys.modules.get("__main__"), "main", None) is main


def _exit_now(code: int) -> None:
    """End the process with ``code`` at once, skipping the interpreter's teardown; returns (and the
    caller exits as usual) when a stream cannot be flushed (the usual exit then reports it) or
    when exit handlers are registered (e.g. coverage): they must run."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return
    if atexit._ncallbacks():
        return
    os._exit(code)


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        skip_pydantic_plugin_discovery()
        from orchestrator.fastpath import run_status_fast

        try:
            signal.signal(signal.SIGTERM, _sigterm)
        except ValueError:  # not the main thread (embedded use)
            pass
        code = run_status_fast(args)
        if code is not None and _is_process_entry(argv):
            _exit_now(code)
    finally:
        if gc_was_enabled:  # the Typer CLI (long runs) and embedding callers get it back
            gc.enable()
    if code is not None:
        sys.exit(code)
    from orchestrator.cli import main as cli_main

    cli_main(args)


if __name__ == "__main__":  # pragma: no cover - exercised through subprocess tests
    main()

"""STAND-IN for a live SGLang server, for cut-over tests only. It is not SGLang.

Started by tests/support/sglang_standin_launcher.py (an inventory's ``service.restart``) and
driven from tests through :class:`tests.support.sglang_standin.Standin`.

A small ``ThreadingHTTPServer`` that answers like an SGLang HTTP server where the
cut-over tool looks: ``GET /health`` and a deterministic greedy ``POST /generate``
(``{"text", "sampling_params": {"max_new_tokens"}}`` -> ``{"text", "output_ids",
"meta_info"}``). At start it reads the same ``verify_backend.json`` (and kill switch) that
the real plugin reads, through ``sglang_verify_plugin.config.load_config``, and reports
the active verify backend in ``/health``.

Failure modes come from a JSON control file (``--control``, default
``<root>/standin_control.json``), read at start and on every request, so a test can make
the *new* kernel misbehave and check that the rollback (stock) path recovers. Each mode's
value is ``"off"``, ``"bundled"`` (only while the bundled kernel is active) or ``"always"``:

- ``fail_health``: ``/health`` answers 503;
- ``hang_health``: ``/health`` never answers (sleeps);
- ``change_outputs``: ``/generate`` returns different tokens (a wrong kernel);
- ``crash_on_start``: the process exits at start (the service never comes up);
- ``extra_latency``: ``/generate`` sleeps ``extra_latency_ms`` more;
- ``plugin_missing``: the plugin "did not load": no ``active.json`` is written at start.

Like SGLang with the plugin installed, it writes ``<root>/active.json`` at start
(``sglang_verify_plugin.config.record_active``, the function the plugin's factory calls).

``startup_delay_s`` delays the bind, like a model load. Every ``/generate`` takes at least
``base_latency_ms`` (default 20, like a short decode) so latency ratios are not dominated by
scheduling noise of a sub-millisecond handler.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

KERNELS = Path(__file__).resolve().parents[2] / "kernels"
if str(KERNELS) not in sys.path:
    sys.path.insert(0, str(KERNELS))

from sglang_standin_ranks import StandinRanks  # noqa: E402  (per-rank records, in the plugin's format; a sibling module)

from sglang_verify_plugin.config import CONFIG_ENV, CONFIG_NAME, load_config  # noqa: E402

VOCAB = 32000
MODES = ("off", "bundled", "always")


class StandinState:
    """What this stand-in process runs with: the verify backend chosen at start."""

    def __init__(self, root: Path, control: Path) -> None:
        env = dict(os.environ)
        env.setdefault(CONFIG_ENV, str(root / CONFIG_NAME))
        self.config = load_config(env)
        self.control_path = control
        self.started_at = time.time()
        self.ranks = StandinRanks(self.config, env, self.active, self.control)
        self.ranks.write_records()  # nothing when plugin_missing

    @property
    def backend(self) -> str:
        return "bundled" if self.config.bundled else "stock"

    def control(self) -> dict[str, Any]:
        try:
            doc = json.loads(self.control_path.read_text(encoding="utf-8"))
        except (FileNotFoundError, json.JSONDecodeError):
            return {}
        return doc if isinstance(doc, dict) else {}

    def active(self, mode: str) -> bool:
        value = self.control().get(mode, "off")
        if value not in MODES:
            return False
        return value == "always" or (value == "bundled" and self.config.bundled)


def greedy_tokens(prompt: str, n: int) -> list[int]:
    """Deterministic "greedy decode": a hash chain seeded by the prompt."""
    out, state = [], hashlib.sha256(prompt.encode()).digest()
    for _ in range(n):
        state = hashlib.sha256(state).digest()
        out.append(int.from_bytes(state[:4], "little") % VOCAB)
    return out


def make_handler(state: StandinState) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "sglang-standin/0"

        def log_message(self, fmt: str, *args: Any) -> None:  # quiet: tests read JSON
            sys.stderr.write("standin: " + (fmt % args) + "\n")

        def _send(self, code: int, doc: Any) -> None:
            body = json.dumps(doc).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802
            if self.path not in ("/health", "/health_generate"):
                self._send(404, {"error": "not found"})
                return
            if state.active("hang_health"):
                time.sleep(3600)
                return
            if state.active("fail_health"):
                self._send(503, {"status": "unhealthy", "standin": True})
                return
            self._send(
                200,
                {
                    "status": "ok",
                    "standin": True,
                    "pid": os.getpid(),
                    "verify_backend": state.backend,
                    "bundle_sha": state.config.bundle_sha,
                    "config_reason": state.config.reason,
                    "started_at": state.started_at,
                },
            )

        def do_POST(self) -> None:  # noqa: N802
            if self.path != "/generate":
                self._send(404, {"error": "not found"})
                return
            try:
                length = int(self.headers.get("Content-Length") or 0)
                req = json.loads(self.rfile.read(length).decode() or "{}")
                prompt = req["text"]
                n = int((req.get("sampling_params") or {}).get("max_new_tokens", 16))
                if not isinstance(prompt, str) or not 0 < n <= 4096:
                    raise ValueError("text must be a string, 0 < max_new_tokens <= 4096")
            except (ValueError, KeyError, TypeError) as exc:
                self._send(400, {"error": f"bad request: {exc}"})
                return
            control = state.control()
            time.sleep(float(control.get("base_latency_ms", 20)) / 1000.0)
            if state.active("extra_latency"):
                time.sleep(float(control.get("extra_latency_ms", 0)) / 1000.0)
            ids = greedy_tokens(prompt, n)
            state.ranks.verify_calls()
            if state.active("change_outputs"):
                ids = ids[:-1] + [(ids[-1] + 1) % VOCAB]
            self._send(
                200,
                {
                    "text": " ".join(f"t{i}" for i in ids),
                    "output_ids": ids,
                    "meta_info": {
                        "prompt_tokens": len(prompt.split()),
                        "completion_tokens": n,
                        "verify_backend": state.backend,
                    },
                },
            )

    return Handler


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="stand-in for a live SGLang server (tests only)")
    p.add_argument("--root", required=True, type=Path)
    p.add_argument("--port", required=True, type=int)
    p.add_argument("--bind", default="127.0.0.1")
    p.add_argument("--control", type=Path)
    args = p.parse_args(argv)
    state = StandinState(args.root, args.control or args.root / "standin_control.json")
    if state.active("crash_on_start"):
        print("standin: crash_on_start is set; exiting", file=sys.stderr)
        return 3
    delay = float(state.control().get("startup_delay_s", 0) or 0)
    if delay > 0:
        time.sleep(delay)
    ThreadingHTTPServer.daemon_threads = True
    server = ThreadingHTTPServer((args.bind, args.port), make_handler(state))
    print(f"standin: serving on {args.bind}:{args.port} backend={state.backend}", file=sys.stderr, flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

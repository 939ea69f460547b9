"""The built-in ``facts`` step: toolchain facts of a host as one JSON document.

Runs fixed argument lists through the host's transport (no shell): ``nvcc --version``,
``nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader``, the host
interpreter printing torch's version, its CUDA version and whether a device is visible, and the
service interpreter (or the host one) printing the installed sglang version.
A missing tool is a fact (``found: false``), not a failure; the document is always ``ok``.

For a ``model_family: auto`` host (``family_root`` = its remote_root) it also runs the bundle's
``cutover_agent.probe --family-only`` in the service interpreter: SGLang's own resolution of the
service's launch arguments and the model's config.json says ``dsa`` or ``dense_mla``
(``model.family``; None with ``model.reason`` when it cannot tell). The planner uses the
recorded value for that host's later phases (which kernel and route they run).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from orchestrator.transport.base import CommandResult, Transport

TORCH_PROBE = (
    "import json\n"
    "try:\n"
    "    import torch\n"
    "    d = {'found': True, 'version': torch.__version__, 'cuda': torch.version.cuda,\n"
    "         'cuda_available': bool(torch.cuda.is_available())}\n"
    "except Exception as e:\n"
    "    d = {'found': False, 'error': type(e).__name__ + ': ' + str(e)}\n"
    "print(json.dumps(d))\n"
)


SGLANG_PROBE = (
    "import importlib.metadata as m\n"
    "try:\n"
    "    print(m.version('sglang'))\n"
    "except m.PackageNotFoundError:\n"
    "    print('')\n"
)


def probe_commands(
    python: str, service_python: str | None = None, family_root: str | None = None
) -> dict[str, list[str]]:
    cmds = {
        "nvcc": ["nvcc", "--version"],
        "nvidia_smi": ["nvidia-smi", "--query-gpu=name,compute_cap,driver_version", "--format=csv,noheader"],
        "torch": [python, "-c", TORCH_PROBE],
        "sglang": [service_python or python, "-c", SGLANG_PROBE],
    }
    if family_root is not None:
        cmds["model"] = [
            service_python or python,
            "-m",
            "cutover_agent.probe",
            "--family-only",
            "--json",
            "--root",
            family_root,
        ]
    return cmds


def parse_model(r: CommandResult) -> dict[str, Any]:
    """``{"family": dsa | dense_mla | None, "reason": ..., "architectures": [...]}`` from the probe."""
    try:
        doc = json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        tail = (r.stderr or "").strip().splitlines()[-1:] or [f"exit {r.exit_code}"]
        return {"family": None, "reason": f"the family probe printed no JSON: {tail[0][:200]}"}
    if not isinstance(doc, dict):
        return {"family": None, "reason": "the family probe printed no JSON object"}
    family = doc.get("model_family")
    return {
        "family": family if family in ("dsa", "dense_mla") else None,
        "reason": doc.get("reason") or doc.get("blocked"),
        "architectures": doc.get("architectures"),
        "source": doc.get("launch_args_source"),
    }


def parse_nvcc(r: CommandResult) -> dict[str, Any]:
    if r.exit_code != 0:
        return {"found": False}
    m = re.search(r"release ([0-9]+\.[0-9]+)", r.stdout)
    return {"found": True, "version": m.group(1) if m else None}


def parse_nvidia_smi(r: CommandResult) -> dict[str, Any]:
    if r.exit_code != 0:
        return {"found": r.exit_code != 127, "gpus": [], "compute_capability": None}
    gpus = []
    for line in r.stdout.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 3:
            gpus.append({"name": parts[0], "compute_capability": parts[1], "driver": parts[2]})
    return {"found": True, "gpus": gpus, "compute_capability": gpus[0]["compute_capability"] if gpus else None}


def parse_torch(r: CommandResult) -> dict[str, Any]:
    try:
        doc = json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        doc = None
    return doc if isinstance(doc, dict) else {"found": False, "error": f"exit {r.exit_code}"}


def parse_sglang(r: CommandResult) -> dict[str, Any]:
    version = r.stdout.strip().splitlines()[-1] if r.exit_code == 0 and r.stdout.strip() else ""
    return {"found": bool(version), "version": version or None}


def collect(
    transport: Transport,
    python: str,
    *,
    cwd: str | None,
    timeout_s: float,
    log_path: Path | None,
    service_python: str | None = None,
    family_root: str | None = None,
) -> CommandResult:
    """Run the probes and return a synthetic CommandResult whose stdout is the facts document."""
    cmds = probe_commands(python, service_python, family_root)
    results: dict[str, CommandResult] = {}
    duration = 0.0
    for key, argv in cmds.items():
        lp = log_path.with_name(f"{log_path.stem}.{key}.log") if log_path else None
        r = transport.run(argv, timeout_s=timeout_s, cwd=cwd, log_path=lp)
        results[key] = r
        duration += r.duration_s
    doc = {
        "ok": True,
        "nvcc": parse_nvcc(results["nvcc"]),
        "gpu": parse_nvidia_smi(results["nvidia_smi"]),
        "torch": parse_torch(results["torch"]),
        "sglang": parse_sglang(results["sglang"]),
    }
    if "model" in results:
        doc["model"] = parse_model(results["model"])
    text = json.dumps(doc, sort_keys=True)
    if log_path is not None:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.write_text(text + "\n")
    return CommandResult(
        host=transport.host_name,
        argv=["<builtin:facts>"],
        exit_code=0,
        stdout=text,
        duration_s=duration,
        log_path=str(log_path) if log_path else None,
    )


def gather(hosts: list[Any], factory: Any, *, forks: int = 10, timeout_s: float = 120) -> dict[str, dict[str, Any]]:
    """Collect facts from every host in parallel (``factory``: Host -> Transport); read-only.

    Returns ``{host: facts document}``; a host that cannot be reached gets
    ``{"ok": false, "unreachable": true, "error": "..."}`` instead of raising.
    """
    import concurrent.futures as cf
    import sys

    from orchestrator.errors import OrchestratorError

    def one(host: Any) -> dict[str, Any]:
        transport = None
        try:
            transport = factory(host)
            python = host.python or (sys.executable if host.is_local else "python3")
            r = collect(
                transport, python, cwd=None, timeout_s=timeout_s, log_path=None, service_python=host.service.python
            )
            doc: dict[str, Any] = json.loads(r.stdout)
            return doc
        except OrchestratorError as exc:
            return {"ok": False, "unreachable": exc.code == "UNREACHABLE", "error": exc.message}
        finally:
            if transport is not None:
                transport.close()

    if not hosts:
        return {}
    with cf.ThreadPoolExecutor(max_workers=min(forks, len(hosts))) as ex:
        return dict(zip([h.name for h in hosts], ex.map(one, hosts)))


def facts_errors(found: dict[str, dict[str, Any]], exit_code: int) -> list[dict[str, Any]]:
    """One envelope error per host whose facts could not be collected."""
    return [
        {
            "code": "UNREACHABLE" if f.get("unreachable") else "FAILED",
            "exit_code": exit_code,
            "host": h,
            "message": f.get("error"),
        }
        for h, f in found.items()
        if not f.get("ok")
    ]

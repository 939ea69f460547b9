"""The digests that approval binds to, computed in this one place.

**Plan digest** = sha256 of canonical JSON over (bundle sha256, the selected hosts, the selected
phase specs' contents, the gate evidence recorded in state by phases earlier than the last
selected phase). A **phase digest** is the same over one phase and the evidence of the phases
before it; a **rollback digest** covers the phases to roll back, the hosts and the plan digest.
Same inputs, same digest; any change in them changes it.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

from orchestrator.state import CONTROLLER, RunState

if TYPE_CHECKING:
    from orchestrator.inventory import Host
    from orchestrator.specs import LoadedPhase, PhaseCatalog

__all__ = ["CONTROLLER", "compute_digest", "evidence_before", "phase_digest", "plan_digest", "rollback_digest"]


def host_identity(h: Host) -> dict[str, Any]:
    """The inventory fields of a host that a digest covers."""
    return {
        "name": h.name,
        "address": h.address,
        "port": h.port,
        "user": h.user,
        "connection": h.connection,
        "arch": h.arch,
        "remote_root": h.remote_root,
        "python": h.python,
        "service": h.service.model_dump(mode="json"),
        # which kernel and route the host's steps run; the default keeps earlier digests unchanged
        **({"model_family": h.model_family} if h.model_family != "dense_mla" else {}),
    }


def evidence_before(state: RunState, catalog: PhaseCatalog, order: int, hosts: list[str]) -> dict[str, Any]:
    """Gate evidence (status, reason, metrics and gate outcomes per host and step) of phases earlier than ``order``."""
    out: dict[str, Any] = {}
    wanted = set(hosts) | {CONTROLLER}
    for lp in catalog.phases:
        if lp.spec.order >= order:
            continue
        rec = state.phase(lp.spec.id)
        if rec is None:
            continue
        per_host: dict[str, Any] = {}
        for s in rec.steps:
            for h, r in s.hosts.items():
                if h not in wanted or (not r.metrics and not r.gates):
                    continue
                ev: dict[str, Any] = {
                    "status": r.status.value,
                    "metrics": r.metrics,
                    "gates": [
                        {"gate": f"{g.metric} {g.op} {json.dumps(g.expected)}", "actual": g.actual, "passed": g.passed}
                        for g in r.gates
                    ],
                }
                if r.status.value != "completed" and r.reason:
                    ev["reason"] = r.reason
                per_host.setdefault(h, {})[s.id] = ev
        if per_host:
            out[lp.spec.label] = {"bundle_sha": rec.bundle_sha, "hosts": per_host}
    return out


def compute_digest(bundle_sha: str, hosts: list[Host], phases: list[LoadedPhase], evidence: dict[str, Any]) -> str:
    doc = {
        "bundle_sha": bundle_sha,
        "hosts": [host_identity(h) for h in hosts],
        "phases": [lp.spec.model_dump(mode="json") for lp in phases],
        "evidence": evidence,
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()


def phase_digest(lp: LoadedPhase, bundle_sha: str, hosts: list[Host], state: RunState, catalog: PhaseCatalog) -> str:
    """The digest of one phase with the evidence of the phases before it (as recorded now)."""
    ev = evidence_before(state, catalog, lp.spec.order, [h.name for h in hosts])
    return compute_digest(bundle_sha, hosts, [lp], ev)


def plan_digest(
    bundle_sha: str, hosts: list[Host], selected: list[LoadedPhase], state: RunState, catalog: PhaseCatalog
) -> tuple[str, dict[str, Any]]:
    """The digest of a plan over ``selected`` phases, and the evidence it covers."""
    last = max(lp.spec.order for lp in selected)
    evidence = evidence_before(state, catalog, last, [h.name for h in hosts])
    return compute_digest(bundle_sha, hosts, selected, evidence), evidence


def rollback_digest(bundle_sha: str, hosts: list[Host], selected: list[LoadedPhase], plan_digest: str) -> str:
    """The digest that ``orchestrator rollback`` of ``selected`` on ``hosts`` is approved with."""
    return compute_digest(bundle_sha, hosts, selected, {"rollback": True, "plan": plan_digest})

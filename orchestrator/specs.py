"""Phase specs: one YAML file per phase under ``phases/``, validated by pydantic (no eval).

A phase is an ordered list of steps. A step runs an argument list on a placement
(``local``: once on this machine; ``each_host``: every selected host in parallel;
``canary_then_rest``: the canary host first, then the others in waves), reads the one JSON
document the command prints (plans/0001 §2), records the ``metrics`` (dotted paths into that
document) and checks typed ``gates`` over them. ``rollback_steps`` are only run to undo
(automatically on a host where a later step failed, or by ``orchestrator rollback``).

A step may differ per model family (the inventory's ``model_family`` of a host, plans/0002 on
GLM-5): ``by_model_family: {dsa: {command, metrics, gates, title, timeout_s}}`` replaces those
fields for hosts of that family; the others run the step as written. Placement, approval and
rollback are the step's own for every host, so one step id has one meaning in the state and
the plan; only what runs and what it is gated on differs.
"""

from __future__ import annotations

import json
import os
import re
from enum import Enum
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from orchestrator.errors import SpecError
from orchestrator.placeholders import placeholders_in, unknown_placeholders
from orchestrator.yamlio import load_yaml_document, validation_error_line

_ID = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
_METRIC = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*$")

#: Built-in step kinds that are not a shell command (``builtin: facts`` collects toolchain facts).
BUILTINS = ("facts",)
#: The concrete model families a step variant may name (``auto`` is resolved before planning).
ModelFamilyName = Literal["dense_mla", "dsa"]

Scalar = bool | int | float | str


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Priority(str, Enum):
    high = "high"
    medium = "medium"
    low = "low"


class Placement(str, Enum):
    local = "local"
    each_host = "each_host"
    canary_then_rest = "canary_then_rest"


class GateOp(str, Enum):
    eq = "=="
    ne = "!="
    lt = "<"
    le = "<="
    gt = ">"
    ge = ">="


class Gate(Strict):
    """``metric op value``: the metric is a dotted path into the step's JSON document.

    A string ``value`` may use placeholders (e.g. ``"{arch}"``), filled per host.
    """

    metric: str
    op: GateOp
    value: Scalar
    reason: str = Field(min_length=1)

    @field_validator("metric")
    @classmethod
    def _metric(cls, v: str) -> str:
        if not _METRIC.match(v):
            raise ValueError(f"metric {v!r} is not a dotted path like summary.spill_bytes")
        return v

    @field_validator("value")
    @classmethod
    def _value(cls, v: Scalar) -> Scalar:
        if isinstance(v, str):
            bad = unknown_placeholders(v)
            if bad:
                raise ValueError(f"unknown placeholder {{{bad[0]}}} in gate value")
        return v

    def describe(self) -> str:
        return f"{self.metric} {self.op.value} {json.dumps(self.value)}"


class StepVariant(Strict):
    """What a step runs and checks on hosts of one model family (``by_model_family``)."""

    title: str | None = Field(default=None, min_length=1)
    command: list[str] | None = None
    timeout_s: float | None = Field(default=None, gt=0, le=24 * 3600)
    metrics: list[str] | None = None
    gates: list[Gate] | None = None


class Step(Strict):
    """One todo item of a phase. ``command`` is an argv list; ``timeout_s`` is wall seconds."""

    id: str
    title: str = Field(min_length=1)
    priority: Priority = Priority.medium
    runs_on: Placement = Placement.each_host
    command: list[str] | None = None
    builtin: Literal["facts"] | None = None
    timeout_s: float = Field(default=600, gt=0, le=24 * 3600)
    # plain [] defaults (pydantic copies them per instance): a builtin default_factory makes
    # pydantic inspect.signature(list), which compiles tokenize's regexes at every start
    metrics: list[str] = []
    gates: list[Gate] = []
    requires_approval: bool = False
    changes: str | None = None  # what it changes, shown in the approval summary
    rollback: str | None = None  # id of a rollback step in the same phase
    by_model_family: dict[ModelFamilyName, StepVariant] = {}

    @field_validator("id")
    @classmethod
    def _id(cls, v: str) -> str:
        if not _ID.match(v):
            raise ValueError(f"step id {v!r} must match {_ID.pattern}")
        return v

    @field_validator("command")
    @classmethod
    def _command(cls, v: list[str] | None) -> list[str] | None:
        if v is None:
            return v
        if not v:
            raise ValueError("command is empty")
        for arg in v:
            if "\x00" in arg or "\n" in arg:
                raise ValueError("command argument contains a NUL or newline")
            try:
                bad = unknown_placeholders(arg)
            except ValueError as exc:
                raise ValueError(str(exc)) from None
            if bad:
                raise ValueError(f"unknown placeholder {{{bad[0]}}} (allowed: see plans/0001 §4)")
        return v

    @field_validator("metrics")
    @classmethod
    def _metrics(cls, v: list[str]) -> list[str]:
        for m in v:
            if not _METRIC.match(m):
                raise ValueError(f"metric {m!r} is not a dotted path")
        return v

    @model_validator(mode="after")
    def _shape(self) -> Step:
        if (self.command is None) == (self.builtin is None):
            raise ValueError("a step needs exactly one of command or builtin")
        for g in self.gates:
            if g.metric not in self.metrics:
                raise ValueError(f"gate metric {g.metric!r} is not listed in metrics")
        for family, variant in self.by_model_family.items():
            if self.builtin is not None:
                raise ValueError("a builtin step cannot have by_model_family variants")
            if not variant.model_fields_set:
                raise ValueError(f"by_model_family.{family} changes nothing")
            try:
                self.for_family(family)
            except ValidationError as exc:
                first = exc.errors(include_url=False)[0]
                where = ".".join(str(p) for p in first["loc"])
                raise ValueError(
                    f"by_model_family.{family}{'.' + where if where else ''}: {first['msg'].removeprefix('Value error, ')}"
                ) from None
        return self

    def for_family(self, family: str | None) -> Step:
        """This step as it runs on a host of ``family`` (itself when no variant names it)."""
        variant = self.by_model_family.get(family) if family else None  # type: ignore[call-overload]
        if variant is None:
            return self
        fields = self.model_dump(exclude={"by_model_family"})
        fields.update(variant.model_dump(exclude_unset=True))
        return Step.model_validate(fields)

    def uses_family(self) -> bool:
        """Whether what runs depends on the host's model family (a variant or ``{model_family}``)."""
        return bool(self.by_model_family) or "model_family" in self.placeholders()

    def placeholders(self) -> set[str]:
        names: set[str] = set()
        variants = [self, *(self.for_family(f) for f in self.by_model_family)]
        for step in variants:
            for arg in step.command or []:
                names.update(placeholders_in(arg))
            for g in step.gates:
                if isinstance(g.value, str):
                    names.update(placeholders_in(g.value))
        return names


class FailurePolicy(Strict):
    """``fail_fast``: stop starting steps on other hosts after the first host fails.
    ``continue``: keep going on the other hosts while at most ``max_failed_hosts`` failed
    (``null``: no limit)."""

    mode: Literal["fail_fast", "continue"] = "fail_fast"
    max_failed_hosts: int | None = Field(default=None, ge=0)


WaveSize = int | str


def _canary_wave() -> list[WaveSize]:
    return [1]


class PhaseSpec(Strict):
    id: int = Field(ge=0, le=999)
    name: str
    order: int
    title: str = Field(min_length=1)
    description: str = ""
    requires: int | None = None  # id of the predecessor phase that must have passed on the host
    failure_policy: FailurePolicy = FailurePolicy()
    waves: list[WaveSize] = Field(default_factory=_canary_wave)
    undo: str = ""  # how to undo, shown in the approval summary
    steps: list[Step] = Field(min_length=1)
    rollback_steps: list[Step] = []

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _ID.match(v):
            raise ValueError(f"phase name {v!r} must match {_ID.pattern}")
        return v

    @field_validator("waves")
    @classmethod
    def _waves(cls, v: list[WaveSize]) -> list[WaveSize]:
        if not v or v[0] != 1:
            raise ValueError("waves must start with 1 (the canary host alone)")
        for w in v:
            if isinstance(w, bool):
                raise ValueError("wave size must be an integer or a percentage like '50%'")
            if isinstance(w, int):
                if w < 1:
                    raise ValueError(f"wave size {w} must be >= 1")
            elif not re.fullmatch(r"([1-9][0-9]?|100)%", w):
                raise ValueError(f"wave size {w!r} must be an integer or 'N%' (1-100)")
        return v

    @model_validator(mode="after")
    def _refs(self) -> PhaseSpec:
        ids = [s.id for s in self.steps] + [s.id for s in self.rollback_steps]
        dup = {i for i in ids if ids.count(i) > 1}
        if dup:
            raise ValueError(f"duplicate step id {sorted(dup)[0]!r}")
        rb = {s.id for s in self.rollback_steps}
        for s in self.steps:
            if s.rollback is not None and s.rollback not in rb:
                raise ValueError(f"step {s.id!r}: rollback {s.rollback!r} is not a rollback_steps id")
        for s in self.rollback_steps:
            if s.rollback is not None or s.requires_approval:
                raise ValueError(f"rollback step {s.id!r} cannot itself declare rollback/requires_approval")
        return self

    @property
    def label(self) -> str:
        return f"{self.id}-{self.name}"

    @property
    def needs_approval(self) -> bool:
        return any(s.requires_approval for s in self.steps)

    def step(self, step_id: str) -> Step:
        for s in list(self.steps) + list(self.rollback_steps):
            if s.id == step_id:
                return s
        raise KeyError(step_id)


class LoadedPhase:
    """A validated spec plus where it came from and the sha256 of its canonical contents.

    Read-only. A plain class, not a model: ``status`` builds one per phase file on every start,
    and the sha256 (a canonical JSON dump of the spec) is computed on first use only."""

    __slots__ = ("_spec", "_path", "_sha256")

    def __init__(self, spec: PhaseSpec, path: Path, sha256: str | None = None) -> None:
        self._spec = spec
        self._path = path
        self._sha256 = sha256

    @property
    def spec(self) -> PhaseSpec:
        return self._spec

    @property
    def path(self) -> Path:
        return self._path

    @property
    def sha256(self) -> str:
        if self._sha256 is None:
            self._sha256 = _canonical_sha(self._spec)
        return self._sha256

    def __repr__(self) -> str:
        return f"LoadedPhase({self._spec.label!r}, path={str(self._path)!r})"


class PhaseCatalog:
    """All phases of a phases dir, sorted by ``order`` (read-only)."""

    __slots__ = ("_directory", "_phases")

    def __init__(self, directory: Path, phases: list[LoadedPhase]) -> None:
        self._directory = directory
        self._phases = list(phases)

    @property
    def directory(self) -> Path:
        return self._directory

    @property
    def phases(self) -> list[LoadedPhase]:
        return self._phases

    def __repr__(self) -> str:
        return f"PhaseCatalog({str(self._directory)!r}, {[lp.spec.label for lp in self._phases]})"

    def resolve(self, key: str | int) -> LoadedPhase:
        """Find a phase by id (``"3"``), name (``integration``) or label (``3-integration``)."""
        k = str(key).strip()
        for p in self.phases:
            if k in (str(p.spec.id), p.spec.name, p.spec.label):
                return p
        known = ", ".join(p.spec.label for p in self.phases)
        raise SpecError(f"unknown phase {k!r} (phases dir {self.directory})", hint=f"known phases: {known}", phase=k)

    def by_id(self, phase_id: int) -> LoadedPhase | None:
        for p in self.phases:
            if p.spec.id == phase_id:
                return p
        return None


def _canonical_sha(spec: PhaseSpec) -> str:
    import hashlib  # only plan/run need it (hashlib's OpenSSL binding is a cost at every start)

    doc = json.dumps(spec.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(doc.encode()).hexdigest()


def load_phase(path: Path) -> LoadedPhase:
    ydoc = load_yaml_document(path, what="phase spec")
    data = ydoc.data
    try:
        spec = PhaseSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(
            validation_error_line(path, exc, data, ydoc), hint="see phases/*.yaml and plans/0001 §4"
        ) from None
    return LoadedPhase(spec=spec, path=path)


def default_phases_dir() -> Path:
    from orchestrator.paths import project_root

    env = os.environ.get("ORCHESTRATOR_PHASES_DIR")
    return Path(env) if env else project_root() / "phases"


def load_catalog(directory: Path | None = None) -> PhaseCatalog:
    """Load every ``*.yaml`` in ``directory``; ids, names and orders must be unique, ``requires`` known."""
    d = directory or default_phases_dir()
    if not d.is_dir():
        raise SpecError(f"{d}: phases directory not found", hint="pass --phases-dir or set ORCHESTRATOR_PHASES_DIR")
    loaded = [load_phase(p) for p in sorted(d.glob("*.yaml"))]
    if not loaded:
        raise SpecError(f"{d}: no phase specs (*.yaml)")
    for attr in ("id", "name", "order"):
        seen: dict[Any, Path] = {}
        for lp in loaded:
            v = getattr(lp.spec, attr)
            if v in seen:
                raise SpecError(f"{lp.path}:{attr}: {v!r} also used by {seen[v]}")
            seen[v] = lp.path
    by_id = {lp.spec.id: lp for lp in loaded}
    for lp in loaded:
        r = lp.spec.requires
        if r is not None:
            if r not in by_id:
                raise SpecError(f"{lp.path}:requires: unknown phase id {r}")
            if by_id[r].spec.order >= lp.spec.order:
                raise SpecError(f"{lp.path}:requires: phase {r} does not come earlier (order)")
    return PhaseCatalog(directory=d, phases=sorted(loaded, key=lambda lp: lp.spec.order))

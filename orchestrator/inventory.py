"""Inventory: the hosts a run targets (plans/0001 §6), loaded from YAML and validated strictly.

A value that could not be used safely on a command line or in a path (spaces, newlines, NULs,
``..`` in ``remote_root``, a name starting with ``-``) is rejected with ``file:field`` and exit 3.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from orchestrator.errors import SpecError
from orchestrator.yamlio import YamlDocument, join_problems, load_yaml_document, loc_to_field, validation_error_line

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
ADDRESS_RE = re.compile(r"^(?:[A-Za-z0-9][A-Za-z0-9.-]*|\[?[0-9A-Fa-f:.]+\]?)$")
_JUMP_HOP = r"(?:[A-Za-z0-9_][A-Za-z0-9_.-]*@)?(?:[A-Za-z0-9][A-Za-z0-9.-]*|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?"
PROXY_JUMP_RE = re.compile(rf"^{_JUMP_HOP}(?:,{_JUMP_HOP})*$")
USER_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
SAFE_PATH_RE = re.compile(r"^[A-Za-z0-9_./~+-]+$")
URL_RE = re.compile(r"^https?://[A-Za-z0-9.\-\[\]:]+(?::[0-9]+)?(?:/[A-Za-z0-9._~/%?&=+-]*)?$")

Arch = Literal["sm_120a", "sm_90a"]
#: Which bundled kernel and SGLang route a host's model needs (plans/0002, the GLM-5 section):
#: ``dense_mla`` (DeepSeek-V3/R1, Kimi K2: mla_verify in SGLang's triton backend), ``dsa`` (GLM-5,
#: DeepSeek-V3.2: dsa_verify in its dsa backend), ``auto`` (phase 0's facts derive it with the
#: probe from the service's launch arguments and config.json; phases 1-4 use the recorded value).
ModelFamily = Literal["dense_mla", "dsa", "auto"]


def _no_control(v: str, what: str) -> str:
    if any(c in v for c in ("\x00", "\n", "\r")):
        raise ValueError(f"{what} contains a NUL or newline")
    return v


def _safe_path(v: str, what: str, *, absolute: bool) -> str:
    _no_control(v, what)
    if not SAFE_PATH_RE.match(v):
        raise ValueError(f"{what} {v!r} has characters outside [A-Za-z0-9_./~+-]")
    if absolute and not v.startswith("/"):
        raise ValueError(f"{what} {v!r} must be an absolute path")
    if ".." in v.split("/"):
        raise ValueError(f"{what} {v!r} must not contain '..'")
    return v


class Service(BaseModel):
    """The SGLang service on a host: how to restart it and where to probe it."""

    model_config = ConfigDict(extra="forbid")

    restart: list[str] | None = None  # argv, e.g. ["systemctl", "restart", "sglang"]
    health_url: str | None = None
    generate_url: str | None = None
    python: str | None = None  # the service's interpreter (has sglang installed)
    health_timeout_s: float = Field(default=600, gt=0)

    @field_validator("restart")
    @classmethod
    def _restart(cls, v: list[str] | None) -> list[str] | None:
        if v is not None:
            if not v:
                raise ValueError("restart argv is empty")
            for a in v:
                _no_control(a, "restart argument")
        return v

    @field_validator("health_url", "generate_url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        if v is not None and not URL_RE.match(_no_control(v, "url")):
            raise ValueError(f"{v!r} is not a plain http(s) URL")
        return v

    @field_validator("python")
    @classmethod
    def _python(cls, v: str | None) -> str | None:
        return None if v is None else _safe_path(v, "service python", absolute=False)


class HostFields(BaseModel):
    """Fields a host may set and ``defaults:`` may supply."""

    model_config = ConfigDict(extra="forbid")

    port: int | None = Field(default=None, ge=1, le=65535)
    user: str | None = None
    connection: Literal["local", "ssh"] | None = None
    ssh_key: str | None = None
    known_hosts: str | None = None
    remote_root: str | None = None
    python: str | None = None
    arch: Arch | None = None
    model_family: ModelFamily | None = None
    service: Service | None = None
    connect_timeout_s: int | None = Field(default=None, ge=1, le=600)
    command_timeout_s: float | None = Field(default=None, gt=0)
    proxy_jump: str | None = None  # ssh -J syntax: [user@]host[:port][,...]; bastions are host-key-checked too

    @field_validator("proxy_jump")
    @classmethod
    def _jump(cls, v: str | None) -> str | None:
        if v is not None and not PROXY_JUMP_RE.match(_no_control(v, "proxy_jump")):
            raise ValueError(f"proxy_jump {v!r} must be [user@]host[:port][,[user@]host[:port]...]")
        return v

    @field_validator("user")
    @classmethod
    def _user(cls, v: str | None) -> str | None:
        if v is not None and not USER_RE.match(_no_control(v, "user")):
            raise ValueError(f"user {v!r} must match {USER_RE.pattern}")
        return v

    @field_validator("ssh_key", "known_hosts")
    @classmethod
    def _paths(cls, v: str | None) -> str | None:
        return None if v is None else _safe_path(v, "path", absolute=False)

    @field_validator("remote_root")
    @classmethod
    def _root(cls, v: str | None) -> str | None:
        return None if v is None else _safe_path(v, "remote_root", absolute=True)

    @field_validator("python")
    @classmethod
    def _python(cls, v: str | None) -> str | None:
        return None if v is None else _safe_path(v, "python", absolute=False)


class HostEntry(HostFields):
    name: str
    address: str | None = None
    groups: list[str] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME_RE.match(_no_control(v, "name")):
            raise ValueError(f"host name {v!r} must match {NAME_RE.pattern}")
        return v

    @field_validator("address")
    @classmethod
    def _address(cls, v: str | None) -> str | None:
        if v is not None and not ADDRESS_RE.match(_no_control(v, "address")):
            raise ValueError(f"address {v!r} is not a host name or IP address")
        return v

    @field_validator("groups")
    @classmethod
    def _groups(cls, v: list[str]) -> list[str]:
        for g in v:
            if not NAME_RE.match(g):
                raise ValueError(f"group {g!r} must match {NAME_RE.pattern}")
        return v


class InventoryFile(BaseModel):
    """The YAML document: ``defaults``, ``hosts`` and optional ``groups`` (name -> host names)."""

    model_config = ConfigDict(extra="forbid")

    defaults: HostFields = HostFields()
    hosts: list[HostEntry] = Field(min_length=1)
    groups: dict[str, list[str]] = Field(default_factory=dict)


class Host(BaseModel):
    """A fully resolved host (defaults applied). ``python=None`` on a local host means this interpreter."""

    model_config = ConfigDict(frozen=True)

    name: str
    address: str
    port: int = 22
    user: str | None = None
    connection: Literal["local", "ssh"] = "ssh"
    ssh_key: str | None = None
    known_hosts: str | None = None
    remote_root: str = "/opt/orchestrator"
    python: str | None = None
    arch: Arch = "sm_120a"
    model_family: ModelFamily = "dense_mla"
    groups: tuple[str, ...] = ()
    service: Service = Service()
    connect_timeout_s: int = 10
    command_timeout_s: float = 3600
    proxy_jump: str | None = None

    @property
    def is_local(self) -> bool:
        return self.connection == "local"

    def restart_json(self) -> str | None:
        return None if self.service.restart is None else json.dumps(self.service.restart)


class Inventory(BaseModel):
    model_config = ConfigDict(frozen=True)

    path: Path
    hosts: tuple[Host, ...]

    def names(self) -> list[str]:
        return [h.name for h in self.hosts]

    def groups(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for h in self.hosts:
            for g in h.groups:
                out.setdefault(g, []).append(h.name)
        return out

    def select(self, limit: str | None) -> list[Host]:
        """Hosts named by ``limit`` (comma-separated host or group names), in inventory order."""
        if not limit:
            return list(self.hosts)
        wanted: set[str] = set()
        groups = self.groups()
        for token in [t.strip() for t in limit.split(",") if t.strip()]:
            if token in self.names():
                wanted.add(token)
            elif token in groups:
                wanted.update(groups[token])
            else:
                raise SpecError(
                    f"{self.path}: --limit {token!r} is neither a host nor a group",
                    hint=f"hosts: {', '.join(self.names())}; groups: {', '.join(sorted(groups)) or '-'}",
                    host=token,
                )
        return [h for h in self.hosts if h.name in wanted]

    def canary(self, hosts: list[Host]) -> Host:
        """The first selected host in group ``canary``, else the first selected host."""
        for h in hosts:
            if "canary" in h.groups:
                return h
        return hosts[0]


def _resolve(ydoc: YamlDocument, doc: InventoryFile) -> Inventory:
    """Apply ``defaults:`` and groups to every host; every problem of every host is collected and
    raised as one :class:`SpecError` (``file:line: field: message; line N: ...``)."""
    path, d = ydoc.path, doc.defaults
    member_of: dict[str, list[str]] = {}
    for g, members in doc.groups.items():
        for m in members:
            member_of.setdefault(m, []).append(g)
    problems: list[tuple[tuple[Any, ...], str, str]] = []  # (loc, field, message)
    first_index: dict[str, int] = {}
    hosts = []
    for i, e in enumerate(doc.hosts):
        where = f"hosts[{i}]({e.name})"
        if e.name in first_index:
            j = first_index[e.name]
            problems.append(
                (("hosts", i, "name"), f"{where}.name", f"duplicate host name {e.name!r} (also hosts[{j}])")
            )
            continue
        first_index[e.name] = i

        def pick(field: str, e: HostEntry = e) -> Any:
            v = getattr(e, field)
            return getattr(d, field) if v is None else v

        if e.name == "local" and e.connection is None:
            problems.append(
                (
                    ("hosts", i),
                    where,
                    "a host named 'local' must say `connection: local` (this machine, no SSH) "
                    "or `connection: ssh`: the name alone is ambiguous",
                )
            )
            continue
        connection = pick("connection") or "ssh"
        address = e.address or ("localhost" if connection == "local" else None)
        if address is None:
            problems.append((("hosts", i), f"{where}.address", "required for an ssh host"))
        service = pick("service") or Service()
        groups = tuple(dict.fromkeys(list(e.groups) + member_of.get(e.name, [])))
        fields: dict[str, Any] = dict(
            name=e.name,
            address=address,
            connection=connection,
            groups=groups,
            service=service,
        )
        for f in (
            "port",
            "user",
            "ssh_key",
            "known_hosts",
            "remote_root",
            "python",
            "arch",
            "model_family",
            "connect_timeout_s",
            "command_timeout_s",
            "proxy_jump",
        ):
            v = pick(f)
            if v is not None:
                fields[f] = v
        if connection == "ssh" and fields.get("python") is None:
            fields["python"] = "python3"
        if connection == "ssh" and not fields.get("known_hosts"):
            problems.append((("hosts", i), f"{where}.known_hosts", "required for ssh hosts (strict host keys)"))
        if address is not None:
            hosts.append(Host(**fields))
    for g, members in doc.groups.items():
        if not NAME_RE.match(g):
            problems.append((("groups", g), f"groups.{g}", f"group name {g!r} must match {NAME_RE.pattern}"))
        for m in members:
            if m not in first_index:
                problems.append((("groups", g), f"groups.{g}", f"group {g!r} names unknown host {m!r}"))
    if problems:
        named = sorted({n for n in (_host_of(fld) for _, fld, _ in problems) if n})
        ssh_keys = any(fld.endswith(".known_hosts") for _, fld, _ in problems)
        raise SpecError(
            join_problems(path, problems, ydoc),
            hint="set defaults.known_hosts or the host's known_hosts"
            if ssh_keys
            else "see inventory/example-blackwell.yaml",
            host=",".join(named) or None,
        )
    return Inventory(path=path, hosts=tuple(hosts))


def _host_of(field: str) -> str | None:
    """``gpu-02`` from a field label like ``hosts[1](gpu-02).port``."""
    if field.startswith("hosts[") and "](" in field:
        return field.split("](", 1)[1].split(")", 1)[0]
    return None


def load_inventory(path: Path) -> Inventory:
    """Load and validate an inventory file; exit-3 :class:`SpecError` naming ``file:line`` and every host."""
    ydoc = load_yaml_document(path, what="inventory")
    data = ydoc.data
    try:
        doc = InventoryFile.model_validate(data)
    except ValidationError as exc:
        raise SpecError(
            validation_error_line(path, exc, data, ydoc),
            hint="see inventory/example-blackwell.yaml",
            host=_hosts_in_errors(exc, data),
        ) from None
    return _resolve(ydoc, doc)


def _hosts_in_errors(exc: ValidationError, data: dict[str, Any]) -> str | None:
    """The names of the hosts a validation error touches, comma-separated (None if none)."""
    names: list[str] = []
    for e in exc.errors(include_url=False):
        loc = tuple(e["loc"])
        if len(loc) >= 2 and loc[0] == "hosts" and isinstance(loc[1], int):
            name = _host_of(loc_to_field(loc[:2], data)) or f"hosts[{loc[1]}]"
            if name not in names:
                names.append(name)
    return ",".join(names) or None

"""The host-side wrapper every remote command runs in: framing markers, its own process group, a pid file.

What sshd runs is ``sh -c <WRAPPER> sh <jobs_dir> <job> <token> <run_id> <cwd> <grace> <mk> <frame> -- <command...>``,
every argument quoted by :func:`shlex.join` (docs/ssh-traps.md, T5). The local transport runs
the very same wrapper as a child process (``frame`` 0: no markers, there is no login shell; its
stdin a pipe that only the controller holds, so the switch below fires when the controller dies,
SIGKILL included). The wrapper

- prints ``<token>:begin`` on stdout and stderr before the command and ``\\n<token>:end <rc>``
  after it, so that whatever the login shell prints (a ``~/.bashrc`` "Welcome to gpu-node-17",
  a MOTD) lies outside the frame and is never read as the command's output (T11);
- starts the command with ``setsid`` in its own session and process group, and records that
  group in ``<jobs_dir>/<job>.pid`` (``pgid=N run=R started=T token=X``) while it runs, so an
  interrupted run can kill the whole group from a fresh channel, and a later run can see that
  an earlier copy of the step is still running (T12);
- keeps a dead man's switch on the channel's stdin: the client never writes to it, so it reads
  end-of-file only when the channel or the connection is gone (the controller was killed, the
  network dropped); the wrapper then kills the group (SIGTERM, SIGKILL after ``grace``), so no
  remote process outlives the run that started it (T13). Once fired the switch finishes even if
  the group's leader exits on the SIGTERM (a member that ignores it is still SIGKILLed), and the
  wrapper ends only after it.

The token is random per command: no banner can contain it by accident.
"""

from __future__ import annotations

import re
import shlex
import uuid
from dataclasses import dataclass

#: ``alive``: true while a process of group ``$pg`` exists that is not a zombie. ``kill -0 -PG``
#: also counts zombies, and a re-parented zombie may wait seconds for a slow PID 1 to reap it
#: (docs/ssh-traps.md, T10). Linux ``/proc``; dash's ``kill`` refuses ``--`` (so ``kill -TERM -PG``).
_ALIVE_SH = r"""
alive() {
  for _s in /proc/[0-9]*/stat; do
    read -r _l < "$_s" 2>/dev/null || continue
    set -- ${_l##*) }
    [ "$1" != Z ] && [ "$3" = "$pg" ] && return 0
  done
  return 1
}
"""

#: The wrapper (POSIX sh). ``$@`` after the eight fixed arguments and ``--`` is the command
#: (``timeout -k K N [env K=V...] argv...`` from :func:`remote_argv`). ``frame=1`` prints the
#: begin/end markers (SSH; a refusal is printed either way). ``mk=1`` (a step)
#: creates the jobs directory; other commands (bundle checks, facts probes) use it only where it
#: exists, so a read-only check writes nothing on a host. Without a usable directory there is
#: no pid file: the command still gets its own group and the dead man's switch. The started child is not a group leader, so ``setsid`` does not fork and
#: ``$child`` is the new group's id.
WRAPPER_SH = (
    _ALIVE_SH
    + r"""
jobs=$1 job=$2 tok=$3 run=$4 cwd=$5 grace=$6 mk=$7 frame=$8
shift 9
if [ "$frame" = 1 ]; then printf '%s:begin\n' "$tok"; printf '%s:begin\n' "$tok" >&2; fi
end() {
  if [ "$frame" = 1 ]; then printf '\n%s:end %s\n' "$tok" "$1"; printf '\n%s:end %s\n' "$tok" "$1" >&2; fi
  exit "$1"
}
if [ -n "$cwd" ]; then cd -- "$cwd" || end 1; fi
pidf=
if [ "$mk" = 1 ]; then mkdir -p -- "$jobs" 2>/dev/null; fi
if [ -n "$jobs" ] && [ -d "$jobs" ] && [ -w "$jobs" ]; then pidf=$jobs/$job.pid; fi
if [ -n "$pidf" ] && [ -f "$pidf" ]; then  # an earlier copy of this step still running: never start a second
  old=$(cat -- "$pidf" 2>/dev/null)
  pg=$(printf '%s\n' "$old" | sed -n 's/^pgid=\([0-9][0-9]*\) .*/\1/p')
  if [ -n "$pg" ] && alive; then printf '%s:refused %s\n' "$tok" "$old"; end 97; fi
fi
exec 3<&0
setsid -w sh -c '
  f=$1 tok=$2 run=$3; shift 3
  if [ -n "$f" ]; then
    printf "pgid=%s run=%s started=%s token=%s\n" "$$" "$run" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$tok" > "$f.tmp.$$" &&
      mv -f -- "$f.tmp.$$" "$f" || rm -f -- "$f.tmp.$$"
  fi
  exec "$@"' sh "$pidf" "$tok" "$run" "$@" </dev/null 3<&- &
child=$!
unrecord() { if [ -n "$pidf" ] && grep -q -- " token=$tok\$" "$pidf" 2>/dev/null; then rm -f -- "$pidf"; fi; }
(
  trap '' HUP
  while read -r _ ; do :; done
  trap '' TERM  # fired: the wrapper's own `kill "$watch"` must not stop the group's SIGKILL
  pg=$child
  i=0
  until kill -TERM "-$pg" 2>/dev/null; do
    kill -0 "$pg" 2>/dev/null || exit 0
    i=$((i+1)); [ $i -lt 20 ] || exit 0
    sleep 0.1
  done
  i=0
  while alive && [ $i -lt $((grace*10)) ]; do sleep 0.1; i=$((i+1)); done
  kill -KILL "-$pg" 2>/dev/null
  unrecord
) <&3 >/dev/null 2>&1 &
watch=$!
exec 3<&-
wait "$child"
rc=$?
kill "$watch" 2>/dev/null
wait "$watch" 2>/dev/null  # at once, unless the switch fired: then until it has killed the group
unrecord
end "$rc"
"""
)

#: Kill the group recorded in a pid file: SIGTERM, SIGKILL after ``grace`` seconds. Prints one
#: word on its last line: ``gone`` (nothing was running), ``terminated`` or ``killed``, or
#: ``other`` (the file names another run's token: left alone). ``token`` may be empty (any).
KILL_SH = (
    _ALIVE_SH
    + r"""
pidf=$1 tok=$2 grace=$3
line=$(cat -- "$pidf" 2>/dev/null) || { echo gone; exit 0; }
pg=$(printf '%s\n' "$line" | sed -n 's/^pgid=\([0-9][0-9]*\) .*/\1/p')
[ -n "$pg" ] || { rm -f -- "$pidf"; echo gone; exit 0; }
if [ -n "$tok" ]; then
  case "$line" in *" token=$tok") ;; *) echo other; exit 0 ;; esac
fi
if ! kill -TERM "-$pg" 2>/dev/null; then rm -f -- "$pidf"; echo gone; exit 0; fi
i=0
while alive && [ $i -lt $((grace*10)) ]; do sleep 0.1; i=$((i+1)); done
if alive; then
  kill -KILL "-$pg" 2>/dev/null
  sleep 0.2
  rm -f -- "$pidf"
  echo killed
else
  rm -f -- "$pidf"
  echo terminated
fi
"""
)

#: Is the job of a pid file still running? Prints ``running <pid-file line>``, or ``none``
#: (no file, or a stale file whose group is gone: removed).
PROBE_SH = (
    _ALIVE_SH
    + r"""
pidf=$1
line=$(cat -- "$pidf" 2>/dev/null) || { echo none; exit 0; }
pg=$(printf '%s\n' "$line" | sed -n 's/^pgid=\([0-9][0-9]*\) .*/\1/p')
if [ -n "$pg" ] && { alive || { sleep 0.3; alive; }; }; then
  printf 'running %s\n' "$line"
else
  rm -f -- "$pidf"
  echo none
fi
"""
)

#: Framing only (control commands: kill, probe): markers around ``"$@"``, no job record.
FRAME_ONLY_SH = r"""
tok=$1
shift 2
printf '%s:begin\n' "$tok"
printf '%s:begin\n' "$tok" >&2
"$@"
rc=$?
printf '\n%s:end %s\n' "$tok" "$rc"
printf '\n%s:end %s\n' "$tok" "$rc" >&2
exit "$rc"
"""

_JOB_RE = re.compile(r"[^A-Za-z0-9_.-]+")


def new_token() -> str:
    """A marker no banner contains by accident."""
    return "orch-" + uuid.uuid4().hex


def job_name(raw: str) -> str:
    """A file-name-safe job name (``3-integration-restart``)."""
    name = _JOB_RE.sub("_", raw).strip("._") or "job"
    return name[:120]


def wrap(
    command: list[str],
    *,
    jobs_dir: str,
    job: str,
    token: str,
    run_id: str,
    cwd: str | None,
    grace_s: int,
    create_jobs_dir: bool = True,
) -> str:
    """The one line sent to sshd for ``command`` (already including ``timeout``)."""
    return shlex.join(
        wrapper_argv(
            command,
            jobs_dir=jobs_dir,
            job=job,
            token=token,
            run_id=run_id,
            cwd=cwd,
            grace_s=grace_s,
            create_jobs_dir=create_jobs_dir,
        )
    )


def wrapper_argv(
    command: list[str],
    *,
    jobs_dir: str,
    job: str,
    token: str,
    run_id: str,
    cwd: str | None,
    grace_s: int,
    create_jobs_dir: bool = True,
    frame: bool = True,
    shell: str = "sh",
) -> list[str]:
    """``[shell, -c, WRAPPER_SH, ...]`` around ``command``: what :func:`wrap` quotes for sshd, and
    what the local transport starts as it is (``frame=False``, ``shell="/bin/sh"``)."""
    mk = "1" if create_jobs_dir else "0"
    fr = "1" if frame else "0"
    return [
        shell,
        "-c",
        WRAPPER_SH,
        "sh",
        jobs_dir,
        job,
        token,
        run_id,
        cwd or "",
        str(grace_s),
        mk,
        fr,
        "--",
        *command,
    ]


def refused_record(stdout: str, token: str) -> JobRecord | None:
    """The pid-file line of the earlier copy when the wrapper refused to start a second one
    (``<token>:refused <line>`` at the start of the command's stdout), else None."""
    refused = f"{token}:refused "
    if not stdout.startswith(refused):
        return None
    rest = stdout[len(refused) :].splitlines()
    return parse_pid_line(rest[0]) if rest else None


def sh_line(script: str, *args: str) -> str:
    return shlex.join(["sh", "-c", script, "sh", *args])


@dataclass
class Framed:
    """A command's output cut out of the channel's stdout/stderr."""

    stdout: str
    stderr: str
    exit_code: int | None  # from the end marker; None when the frame never closed
    banner: str  # what the login shell printed before the frame (stdout and stderr)
    began: bool  # the begin marker was seen (the wrapper ran)


def _cut(text: str, token: str) -> tuple[str, str, int | None, bool]:
    begin = f"{token}:begin\n"
    i = text.find(begin)
    if i < 0:
        return "", text, None, False
    before = text[:i]
    body = text[i + len(begin) :]
    end = f"\n{token}:end "
    j = body.rfind(end)
    if j < 0:
        return before, body, None, True
    tail = body[j + len(end) :].split("\n", 1)[0].strip()
    code = int(tail) if tail.lstrip("-").isdigit() else None
    return before, body[:j], code, True


def unframe(stdout: str, stderr: str, token: str) -> Framed:
    """Split the channel's output into banner and the command's own stdout/stderr."""
    b_out, out, code, began = _cut(stdout, token)
    b_err, err, _, _ = _cut(stderr, token)
    if not began:  # the wrapper never ran (the login shell failed): keep everything
        return Framed(stdout=stdout, stderr=stderr, exit_code=None, banner="", began=False)
    banner = "\n".join(x.strip("\n") for x in (b_out, b_err) if x.strip())
    return Framed(stdout=out, stderr=err, exit_code=code, banner=banner, began=True)


@dataclass
class JobRecord:
    """One line of a pid file."""

    pgid: int
    run_id: str
    started_at: str
    token: str


def parse_pid_line(line: str) -> JobRecord | None:
    fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
    try:
        pgid = int(fields.get("pgid", ""))
    except ValueError:
        return None
    return JobRecord(
        pgid=pgid, run_id=fields.get("run", ""), started_at=fields.get("started", ""), token=fields.get("token", "")
    )

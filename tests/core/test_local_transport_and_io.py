"""LocalTransport (argv only, timeouts kill the whole process group, logs), atomic writes, placeholders."""

from __future__ import annotations

import json
import os
import sys
import time

import pytest

from orchestrator.atomic import append_line, atomic_write_text
from orchestrator.placeholders import placeholders_in, render, unknown_placeholders
from orchestrator.transport.base import Transport
from orchestrator.transport.local import LocalTransport


def test_local_transport_is_a_transport():
    assert isinstance(LocalTransport("local"), Transport)


def test_runs_argv_without_a_shell_and_captures_streams(tmp_path):
    log = tmp_path / "logs" / "step.log"
    r = LocalTransport("local").run(
        [sys.executable, "-c", "import sys; print('out $HOME;'); print('err', file=sys.stderr)"],
        timeout_s=30,
        cwd=str(tmp_path),
        env={"X_TEST": "1"},
        log_path=log,
    )
    assert r.ok and r.exit_code == 0
    assert r.stdout == "out $HOME;\n"  # no shell expanded anything
    assert r.stderr == "err\n"
    assert log.read_text().startswith("err\n") and "exit=0" in log.read_text()
    assert log.with_suffix(".stdout").read_text() == "out $HOME;\n"


def test_timeout_kills_the_whole_process_group(tmp_path):
    pidfile = tmp_path / "child.pid"
    code = (
        "import subprocess, sys, time\n"
        f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
        "time.sleep(60)\n"
    )
    t0 = time.monotonic()
    r = LocalTransport("local", kill_after_s=1).run([sys.executable, "-c", code], timeout_s=5)
    assert r.timed_out and r.exit_code is None and not r.ok
    assert time.monotonic() - t0 < 20
    assert pidfile.exists(), "the child did not start within the timeout (machine overloaded?)"
    child = int(pidfile.read_text())
    for _ in range(50):  # the grandchild was in the same group: it is gone too
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"grandchild {child} survived the timeout")


def test_timeout_also_kills_a_group_member_that_ignores_sigterm(tmp_path):
    """The leader exits on SIGTERM, a member ignores it: it is SIGKILLed after ``kill_after_s``,
    before ``run`` returns (the switch finishes its kill even though the leader is gone)."""
    pidfile = tmp_path / "stubborn.pid"
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
    code = (
        "import subprocess, sys, time\n"
        f"p = subprocess.Popen([sys.executable, '-c', {stubborn!r}])\n"
        f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
        "time.sleep(60)\n"
    )
    r = LocalTransport("local", kill_after_s=1).run([sys.executable, "-c", code], timeout_s=3)
    assert r.timed_out and r.exit_code is None
    assert pidfile.exists(), "the member did not start within the timeout (machine overloaded?)"
    member = int(pidfile.read_text())
    try:
        stat = open(f"/proc/{member}/stat").read()
    except OSError:
        stat = None
    assert stat is None or stat.rsplit(")", 1)[1].split()[0] == "Z", f"{member} survived the timeout"


def test_a_command_killed_by_a_signal_exits_128_plus_the_signal_as_over_ssh():
    r = LocalTransport("local").run(["sh", "-c", "kill -KILL $$"], timeout_s=10)
    assert r.exit_code == 137 and not r.timed_out and not r.ok


def test_missing_executable_is_exit_127_not_an_exception(tmp_path):
    r = LocalTransport("local").run(["/nonexistent/tool", "--json"], timeout_s=5)
    assert r.exit_code == 127 and r.stderr == "cannot start '/nonexistent/tool': No such file or directory"
    r = LocalTransport("local").run(["no-such-tool-on-path"], timeout_s=5)
    assert r.exit_code == 127 and "cannot start 'no-such-tool-on-path'" in r.stderr
    r = LocalTransport("local").run(["true"], timeout_s=5, cwd=str(tmp_path / "missing"))
    assert r.exit_code == 127 and r.stderr == "cannot start 'true': No such file or directory"
    (tmp_path / "plain").write_text("not executable")
    r = LocalTransport("local").run(["./plain"], timeout_s=5, cwd=str(tmp_path))
    assert r.exit_code == 127 and r.stderr == "cannot start './plain': Permission denied"


def test_the_wrapper_itself_refuses_a_second_copy_whose_record_appears_after_the_check(tmp_path, monkeypatch):
    """Two controllers race: the first copy's record is not there yet when the second checks (here:
    the check is made to miss it). The wrapper looks again as it starts, so nothing starts, the
    caller gets JobStillRunning naming the pid, and the first copy and its record stay."""
    import threading

    from orchestrator.transport.base import JobStillRunning
    from orchestrator.transport.local import terminate_all

    jobs = tmp_path / "jobs"
    first_log = tmp_path / "state" / "runs" / "r1" / "local" / "0-quick-probe.log"
    th = threading.Thread(
        target=lambda: LocalTransport("local", jobs_dir=jobs).run(["sleep", "319.1"], timeout_s=60, log_path=first_log)
    )
    th.start()
    pid_file = jobs / "0-quick-probe.pid"
    try:
        deadline = time.monotonic() + 20
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        record = pid_file.read_text()
        pgid = int(record.split()[0].split("=")[1])
        monkeypatch.setattr(LocalTransport, "running_job", lambda self, job: None)
        ran = tmp_path / "second-copy-ran"
        second_log = tmp_path / "state" / "runs" / "r2" / "local" / "0-quick-probe.log"
        with pytest.raises(JobStillRunning, match=f"still running as pid {pgid} .*by run r1"):
            LocalTransport("local", jobs_dir=jobs).run(["touch", str(ran)], timeout_s=10, log_path=second_log)
        assert not ran.exists()
        assert pid_file.read_text() == record
        os.killpg(pgid, 0)  # the first copy still runs
    finally:
        terminate_all(1.0)
        th.join(10)
    assert not pid_file.exists()


def test_atomic_write_keeps_the_old_file_when_the_rename_fails(tmp_path, monkeypatch):
    target = tmp_path / "state.json"
    atomic_write_text(target, json.dumps({"v": 1}))

    def boom(*a, **k):
        raise OSError("disk on fire")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        atomic_write_text(target, json.dumps({"v": 2}))
    monkeypatch.undo()
    assert json.loads(target.read_text()) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]  # the temp file was removed


def test_append_line_appends_single_lines_only(tmp_path):
    p = tmp_path / "audit.jsonl"
    append_line(p, '{"a": 1}')
    append_line(p, '{"a": 2}')
    assert p.read_text().splitlines() == ['{"a": 1}', '{"a": 2}']
    with pytest.raises(ValueError):
        append_line(p, "two\nlines")


def test_placeholders_escape_and_reject():
    assert placeholders_in("{python} -c {{x}}") == ["python"]
    assert render("{{literal}} {host}", {"host": "h1"}) == "{literal} h1"
    assert unknown_placeholders("{nope}") == ["nope"]
    with pytest.raises(ValueError, match="unbalanced"):
        placeholders_in("{python")
    with pytest.raises(ValueError, match="invalid placeholder"):
        placeholders_in("{a.b}")
    with pytest.raises(KeyError):
        render("{health_url}", {"health_url": None})

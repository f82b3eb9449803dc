"""The service's ready driver (kopt.cli.launchpad) against fronts that misbehave: a spare that
took a connection answers or gives up within its wait, and runs nothing it was not handed
properly. Each spare runs :func:`kopt.cli.launchpad.serve` on the accepted connection; here it
runs in a thread on one end of a socket pair, the test playing the front on the other."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import threading
import time

import pytest

from kopt.cli import front, launchpad
from kopt.run import launchpad as handle


@pytest.fixture
def spare(monkeypatch):
    """(front's socket, the spare's thread, its result list): ``serve`` running on the
    other end with a short wait for the front."""
    monkeypatch.setattr(launchpad, "GO_WAIT_S", 0.5)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    notify_r, notify_w = os.pipe()
    result: list[int] = []
    t = threading.Thread(target=lambda: result.append(
        launchpad.serve(theirs, dict(os.environ), notify_w)), daemon=True)
    t.start()
    yield ours, t, result
    ours.close()  # a spare still blocked (the defect) sees the end of the stream
    t.join(timeout=5)
    theirs.close()
    # a spare that ran nothing tells the launchpad so: not a sweep served
    os.set_blocking(notify_r, False)
    assert os.read(notify_r, 8) == b"d"
    os.close(notify_r)
    os.close(notify_w)


def test_a_front_that_sends_nothing_does_not_hold_the_spare(spare):
    ours, t, result = spare
    t0 = time.time()
    t.join(timeout=5)  # it waited in recv for ever: a process per silent connection
    assert not t.is_alive() and result == [0]
    assert time.time() - t0 < 3


def test_a_huge_length_prefix_is_declined_at_once(spare):
    ours, t, result = spare
    ours.sendall(struct.pack(">I", 1 << 31) + b"{}")  # it read on, towards 2 GiB
    ours.settimeout(5)
    assert front.recv(ours) == {"ok": False, "why": "no request", "pid": os.getpid()}
    t.join(timeout=5)
    assert result == [0]


def test_a_request_without_stdin_stdout_stderr_is_declined(spare):
    ours, t, result = spare
    # a well-formed request with no descriptors: the spare accepted it and would have run
    # the sweep with the launchpad's log as its output
    front.send(ours, front.request(["sweep", "nowhere", "--queue"]))
    ours.settimeout(5)
    assert front.recv(ours) == {"ok": False, "pid": os.getpid(),
                                "why": "the request came without stdin, stdout and stderr"}
    t.join(timeout=5)
    assert result == [0]


def test_a_launchpad_started_beside_a_users_workers_package_uses_kopts(tmp_path,
                                                                        monkeypatch):
    # `kopt serve start` in a project with a `workers` package of its own: `python -m
    # kopt.cli.launchpad` put that folder first on sys.path, imported the user's `workers` and
    # died (no ready driver, ever)
    (tmp_path / "workers").mkdir()
    (tmp_path / "workers" / "__init__.py").write_text("")
    monkeypatch.chdir(tmp_path)
    sock, pid = handle.start(os.getpid(), tmp_path / "launch.log")
    try:
        t0 = time.time()
        while not os.path.exists(sock) and time.time() - t0 < 30:
            time.sleep(0.1)
        assert os.path.exists(sock), (tmp_path / "launch.log").read_text()[-2000:]
    finally:
        handle.stop(sock, pid)
    assert not os.path.exists(os.path.dirname(sock))


def test_a_launchpad_whose_head_is_gone_exits_and_removes_its_folder(tmp_path):
    # the head ended without `kopt serve stop` (crashed, killed): the launchpad exited but
    # left its /tmp/kopt-launch-* folder behind, one per service
    head = subprocess.Popen(["true"])
    head.wait()
    sock, pid = handle.start(head.pid, tmp_path / "launch.log")
    t0 = time.time()
    while os.path.exists(os.path.dirname(sock)) and time.time() - t0 < 30:
        time.sleep(0.1)
    assert not os.path.exists(os.path.dirname(sock)), (tmp_path / "launch.log").read_text()
    assert os.waitpid(pid, 0)[1] == 0  # and it exited (its status 0)


def test_the_launchpad_counts_sweeps_not_declined_fronts_and_records_a_killed_driver(
        tmp_path):
    """A spare that took a front writes 1, one that then declined it d: `served` (what
    `serve status` shows) counts only the sweeps run (it counted declined fronts too). A
    driver killed by a signal (here SIGKILL, as the out-of-memory killer does) is recorded
    for its front (kopt.cli.front.exit_file)."""
    import json
    import signal

    pad = launchpad.Launchpad(str(tmp_path / "s.sock"), os.getpid())
    driver = subprocess.Popen(["sleep", "60"])
    pad.spare = driver  # as if spawned, imports done
    try:
        os.write(pad.notify_w, b"1")
        assert pad.step(0.5) and pad.taken == [driver] and pad.spare is None
        pad.spare = subprocess.Popen(["sleep", "60"])
        os.write(pad.notify_w, b"d")  # the driver above declined its front after all
        assert pad.step(0.5) and pad.taken == [driver]
        state = json.loads((tmp_path / "s.sock.json").read_text())
        assert (state["served"], state["declined"]) == (0, 1)
        driver.kill()
        driver.wait()
        assert pad.step(0.1) and pad.taken == []
        assert front.exit_file(str(tmp_path / "s.sock"), driver.pid).read_text() == str(
            -signal.SIGKILL)
    finally:
        pad.close()
        driver.kill()


def test_a_front_whose_driver_was_killed_dies_by_that_signal(tmp_path):
    """The driver went away without an exit status and the launchpad recorded SIGKILL: the
    front says so and ends by SIGKILL (137 in a shell), as the command in one process
    would; it exited 1 saying "killed?". Without a record: status 1."""
    import signal
    import sys

    rec = front.exit_file(str(tmp_path / "s.sock"), 4242)
    rec.write_text(str(-signal.SIGKILL))
    code = "import sys; from kopt.cli import front; sys.exit(front._gone(sys.argv[1]))"
    p = subprocess.run([sys.executable, "-c", code, str(rec)], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == -signal.SIGKILL, p.stderr
    assert "driver process of this sweep was killed by SIGKILL (out of memory?)" in p.stderr
    assert not rec.exists()
    p = subprocess.run([sys.executable, "-c", code.replace("sys.argv[1]", "None")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and "ended without an exit status (killed?)" in p.stderr


def test_limits_a_driver_cannot_take_decline_the_front(monkeypatch):
    """A front at a lower nice, or with a hard limit above the driver's, cannot be matched
    without privileges: declined with the reason (it runs the sweep itself); the same
    limits as the driver's, or lower, are taken."""
    import resource

    nice = os.getpriority(os.PRIO_PROCESS, 0)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    same = {"nice": nice, "rlimits": {"RLIMIT_NOFILE": [soft, hard]}}
    assert launchpad._limits_problem(same) == ""
    assert launchpad._limits_problem({**same, "rlimits": {"RLIMIT_NOFILE": [64, 128]}}) == ""
    assert launchpad._limits_problem({**same, "nice": nice - 1}) == (
        f"the front runs at nice {nice - 1}, below the service's {nice}")
    monkeypatch.setattr(resource, "getrlimit", lambda r: (100, 1000))  # the driver's
    for above in (1001, resource.RLIM_INFINITY):
        assert launchpad._limits_problem({**same, "rlimits": {"RLIMIT_NOFILE": [10, above]}}
                                         ) == (f"the front's hard limit RLIMIT_NOFILE ({above}) "
                                               "is above the service's")
    assert launchpad._limits_problem({**same, "rlimits": {"RLIMIT_NOFILE": [10, 1000]}}) == ""
    assert launchpad._limits_problem({**same, "rlimits": {"RLIMIT_BOGUS": [1, 2]}}) == (
        "the request's resource limit RLIMIT_BOGUS is not one")
    assert launchpad._above(resource.RLIM_INFINITY, 10) and not launchpad._above(
        10, resource.RLIM_INFINITY) and launchpad._above(11, 10)

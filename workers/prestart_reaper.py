"""The parent of a prestarted harness (workers.prestart), between it and the driver.

``python -m workers.prestart_reaper PIDFD STATUS CMD...``: starts CMD (the harness) as its
child in a process group of its own, writes the child's pid to the pipe ``PIDFD`` and
closes it, waits for the child and writes its exit code (``-N`` for signal N) to the file
``STATUS`` (atomically), then exits 0.

Why a process of its own: a candidate runs inside the harness, and one that kills its
parent (``kill(getppid(), SIGKILL)``) killed the driver itself -- the whole sweep, with no
line and its Ray left behind -- when the driver was the harness's parent. Now it kills
this reaper; the harness dies with it (``PR_SET_PDEATHSIG``), and the driver, which reaps
the reaper, writes its status (killed by SIGKILL) in its place. Only the standard library
is imported here (and workers.reap, as small): this process starts before the harness
can.

With ``$KOPT_CGROUP_DIRS`` set (workers.cgroup), the harness starts in that cgroup (its task
and memory limits), and the reaper removes the cgroup once the harness has exited.
"""

from __future__ import annotations

import os
import signal
import sys

from workers import cgroup  # the standard library only, as the next
from workers.reap import die_with_parent  # the standard library only, too


def exit_code(status: int) -> int:
    """A ``waitpid`` status as subprocess.Popen's returncode: the exit code, or ``-N``."""
    return (-os.WTERMSIG(status) if os.WIFSIGNALED(status)
            else os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1)


def write_status(path: str, code: int) -> None:
    """Write ``code`` to ``path`` atomically; a folder already removed is no error."""
    tmp = path + ".tmp"
    try:
        with open(tmp, "w") as f:
            f.write(str(code))
        os.replace(tmp, path)
    except OSError:
        pass


_state: dict[str, int | bool] = {"pid": 0, "orphaned": False}  # the harness; the driver died


def _driver_died(signum: int, frame: object) -> None:
    """SIGTERM, this process's parent-death signal (workers.prestart): the driver is gone,
    so nobody reads the harness's status or removes its folder. Kill the harness; :func:`main`
    then removes the folder (a killed driver left them in /tmp, seen after CI runs)."""
    _state["orphaned"] = True
    if _state["pid"]:
        try:
            os.killpg(int(_state["pid"]), signal.SIGKILL)
        except OSError:
            pass
        cg = cgroup.from_env()
        if cg is not None:  # held frozen (workers.hold) by an actor that died: a v1 frozen
            cg.thaw()  # process dies only once thawed


def main(argv: list[str]) -> int:
    """Start ``argv[2:]``, report its pid on fd ``argv[0]``, write its exit to ``argv[1]``;
    once the driver is gone (SIGTERM), kill it and remove the folder of ``argv[1]``."""
    pid_fd, status, cmd = int(argv[0]), argv[1], argv[2:]
    signal.signal(signal.SIGTERM, _driver_died)
    # the harness's task and memory limits (workers.cgroup): joined here, before the fork,
    # so that the harness is in it when its pid is told (the driver checks: Cgroup.holds)
    cg = cgroup.from_env()
    if cg is not None:
        try:
            cg.join()
        except OSError:
            cg = None
    me = os.getpid()
    pid = os.fork()
    if pid == 0:  # the harness
        try:
            os.close(pid_fd)
            os.setpgid(0, 0)
            die_with_parent(signal.SIGKILL)
            if os.getppid() != me:  # the reaper died before the tie was made
                os._exit(1)
            os.execv(cmd[0], cmd)
        except BaseException as e:  # noqa: BLE001 -- a child must never return here
            print(f"kopt prestart: cannot start {cmd[:3]}: {e!r}", file=sys.stderr, flush=True)
        os._exit(127)
    try:  # here too (the usual pair): its group exists before its pid is told
        os.setpgid(pid, pid)
    except OSError:  # it did so and exec'd already
        pass
    _state["pid"] = pid
    if _state["orphaned"]:  # the driver died before the harness's pid was known
        _driver_died(signal.SIGTERM, None)
    os.write(pid_fd, f"{pid}\n".encode())
    # the harness's listening socket among them: a connection must find none once it died
    os.closerange(3, 1 << 16)
    while True:
        try:
            _, st = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    # reaped: its pid may be another process's (group's) from now on, which the driver's
    # death (SIGTERM: _driver_died) must not kill
    _state["pid"] = 0
    if cg is not None:  # its sandbox's first process has exited: the namespace is empty
        cg.leave()
        cg.remove()
    if _state["orphaned"]:
        import shutil

        shutil.rmtree(os.path.dirname(status), ignore_errors=True)
        return 0
    write_status(status, exit_code(st))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

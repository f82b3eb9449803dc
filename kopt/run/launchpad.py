"""The service's handle on its launchpad process (:mod:`kopt.cli.launchpad`, the `kopt sweep
--queue` drivers kept ready): start it, wait until its spare is ready, read its state for
`kopt serve status`, stop it. The launchpad itself is the CLI's (it runs `kopt` commands); the
service starts it as a process, by module name, and never imports it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import kopt

SOCKET_NAME = "kopt-launch.sock"


IGNORED_ENV = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_CLIENT_MODE",
               "PYTHONBREAKPOINT")  # the last two: Ray's own, set in every driver


# the kopt package's folder (kopt/): a front and its driver must run the same kopt
KOPT_DIR = str(Path(__file__).resolve().parents[1])


def state_of(socket_path: str) -> dict[str, Any] | None:
    """What the launchpad at ``socket_path`` last wrote (None when it has not, or the file
    is damaged), with ``spare_ready``: whether its waiting spare has its imports done."""
    try:
        state = json.loads(Path(socket_path + ".json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(state, dict):
        return None
    try:
        ready = int(Path(socket_path + ".ready").read_text())
    except (OSError, ValueError):
        ready = None
    return {**state, "spare_ready": bool(state.get("spare")) and state.get("spare") == ready}


def wait_ready(socket_path: str, timeout_s: float = 60.0) -> bool:
    """Wait until the launchpad at ``socket_path`` has a spare with its imports done (at
    most ``timeout_s`` s: `kopt serve start` returns once the service's first queued sweep
    can start at once; in docs/verified/2026-12-01-h200-targets.md that sweep waited 1.1 s for
    the imports);
    whether it has."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        st = state_of(socket_path)
        if st is not None and st["spare_ready"]:
            return True
        time.sleep(0.05)
    return False


def start(head_pid: int, log: Path) -> tuple[str, int]:
    """Start the launchpad of the head ``head_pid`` (a session of its own), its socket in a
    folder of its own (``/tmp/kopt-launch-*``, mode 0700: the head's folder is
    world-writable, and a socket there could be replaced), its output into ``log``; returns
    the socket's path and the launchpad's pid. It runs in the folder that holds kopt (``-m``
    puts its working folder first on ``sys.path``: started in the user's, a ``workers`` or
    ``catalog`` package there would stand in for kopt's own)."""

    path = str(Path(tempfile.mkdtemp(prefix="kopt-launch-", dir="/tmp")) / SOCKET_NAME)
    env = {k: v for k, v in kopt.START_ENV.items() if k not in IGNORED_ENV}
    with open(log, "a") as f:
        p = subprocess.Popen([sys.executable, "-m", "kopt.cli.launchpad", path, str(head_pid)],
                             stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
                             env=env, start_new_session=True, cwd=Path(KOPT_DIR).parent)
    return path, p.pid


def own_folder(socket_path: str) -> Path | None:
    """The folder :func:`start` made for ``socket_path`` when it is that (``/tmp/kopt-launch-*``,
    a real folder of this user's that nobody else may write); else None."""
    d = Path(socket_path).parent
    if d.parent != Path("/tmp") or not d.name.startswith("kopt-launch-") or d.is_symlink():
        return None
    try:
        st = d.stat()
    except OSError:
        return None
    return d if st.st_uid == os.getuid() and not st.st_mode & 0o022 else None


def stop(socket_path: str, pid: int | None) -> bool:
    """Stop the launchpad ``pid`` serving ``socket_path`` (only when that process is it:
    its command line names the socket) and remove its folder (:func:`own_folder`).
    Returns whether it stopped a running launchpad (False: none was running as ``pid``)."""
    stopped = False
    if pid:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            cmd = []
        if b"kopt.cli.launchpad" in cmd and socket_path.encode() in cmd:
            try:
                os.kill(pid, signal.SIGTERM)
                stopped = True
            except ProcessLookupError:
                pass
    folder = own_folder(socket_path)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
    return stopped

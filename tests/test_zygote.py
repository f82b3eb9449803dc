"""Harnesses forked from a zygote (workers.zygote): the same sandbox as a plain start, each
with its own environment and random state, and nothing left once their owner is gone."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_harness import artifact, job

from conftest import FIXTURES, ROOT
from workers import isolation
from workers.sandbox import Sandbox

ISOLATED = isolation.available()
SRC = FIXTURES / "faulty" / "faulty.cpp"


def _confinement(sb: Sandbox) -> dict:
    """What confines the harness of ``sb``, read from /proc: its capability sets, no new
    privileges, the system-call filter, its depth of PID namespaces and pid there, its
    limits, every mount it sees (read-only or not; the scratch folder's path as SCRATCH)
    and what its open files are (the log as LOG)."""
    proc = Path(f"/proc/{sb.host_pid}")
    status = dict(line.split(":\t", 1) for line in proc.joinpath("status").read_text()
                  .splitlines() if ":\t" in line)
    keys = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp")
    limits = [line[:26].strip() + " " + " ".join(line[26:].split()) for line in
              proc.joinpath("limits").read_text().splitlines()[1:]]
    mounts = sorted({(f[4].replace(sb.scratch, "SCRATCH"), "ro" in f[5].split(","))
                     for f in (line.split() for line in
                               proc.joinpath("mountinfo").read_text().splitlines())})
    files = sorted(re.sub(r"\[\d+\]", "", os.readlink(proc / "fd" / fd)).replace(
        str(sb.log), "LOG") for fd in os.listdir(proc / "fd"))
    return {**{k: status[k].strip() for k in keys},
            "NSpid": status["NSpid"].split()[1:], "limits": limits, "mounts": mounts,
            "files": files, "in_cgroup": sb.counted is not None and sb.counted.holds(
                sb.host_pid)}


@pytest.mark.skipif(not ISOLATED.isolated or ISOLATED.kind != "namespaces",
                    reason="forks enter the sandbox as root only (the CI machine is root)")
def test_a_forked_harness_is_confined_as_a_plain_one(monkeypatch):
    """Started the plain way (``unshare``, workers.jail, a new interpreter) and forked from
    a zygote, the harness has no capability in any set, no new privileges, the filter on,
    pid 2 of its own PID namespace, the same limits, the same mounts read-only, the same
    four files (its two pipe ends, /dev/null and its log) and its cgroup."""
    seen = {}
    for how in ("plain", "forked"):
        monkeypatch.setenv("KOPT_ZYGOTE", "0" if how == "plain" else "1")
        sb = Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
        try:
            sb.start()
            assert sb.started.split(":")[0] == how
            seen[how] = _confinement(sb)
        finally:
            sb.close()
    forked = seen["forked"]
    assert {k: forked[k] for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")} == {
        k: "0000000000000000" for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")}
    assert (forked["NoNewPrivs"], forked["Seccomp"], forked["NSpid"]) == ("1", "2", ["2"])
    assert ("/", True) in forked["mounts"] and ("SCRATCH", False) in forked["mounts"]
    assert forked["files"] == ["/dev/null", "LOG", "LOG", "pipe:", "pipe:"]
    assert forked == seen["plain"]


def test_each_forked_harness_has_its_own_environment_and_random_state(tmp_path):
    """Two sandboxes whose environments differ only where no import reads (one zygote
    forks both): each harness's ref.py sees its own variable and its own scratch folder as
    TMPDIR, its /proc/self/environ holds neither sandbox's variable nor a scratch folder
    (the zygote's own, import variables only), and Python's ``random`` and torch's default
    generator draw differently in each (red-team round 13: torch's seed was the zygote's in
    every fork)."""
    ref = tmp_path / "ref.py"
    ref.write_text(
        "import os, random, sys, tempfile, torch\n"
        "def reference(x, N):\n"
        "    assert tempfile.gettempdir() == os.environ['TMPDIR'], tempfile.gettempdir()\n"
        "    block = open('/proc/self/environ', 'rb').read().split(b'\\0')\n"
        "    shown = [v for v in block if v.startswith((b'ZYGOTE_TEST_MARK=', b'TMPDIR='))]\n"
        "    print('MARK', os.environ.get('ZYGOTE_TEST_MARK'), 'TMP', os.environ['TMPDIR'],\n"
        "          'DRAW', random.getrandbits(64), 'TORCH', torch.initial_seed(),\n"
        "          'SHOWN', b','.join(shown).decode(), file=sys.stderr, flush=True)\n"
        "    return 2 * x\n")
    art = artifact(tmp_path, SRC, 0)
    said = {}
    for mark in ("one", "two"):
        sb = Sandbox("cpu", {"OMP_NUM_THREADS": "1", "ZYGOTE_TEST_MARK": mark})
        try:
            res = sb.run(job(art, SRC, ref), timeout_s=30)
            assert res["status"] == "ok", res
            said[mark] = re.findall(r"MARK (\S+) TMP (\S+) DRAW (\d+) TORCH (\d+) SHOWN (\S*)",
                                    sb.tail())[0]
            assert said[mark][:2] == (mark, sb.scratch) and sb.started == "forked"
            # the fork's environment block is its zygote's: no sandbox's variable, nor a
            # scratch folder (another harness's, red-team round 13), is in it
            assert re.fullmatch(r"TMPDIR=\S*/kopt-zygote-\w+", said[mark][4]), said[mark]
        finally:
            sb.close()
    assert said["one"][2] != said["two"][2] and said["one"][3] != said["two"][3]


OWNER = """
import json, sys, threading, time
sys.path.insert(0, {root!r})
sys.path.insert(0, {tests!r})
from test_harness import artifact, job
from workers import zygote
from workers.sandbox import Sandbox
SRC = {src!r}
art = artifact(__import__("pathlib").Path({tmp!r}), __import__("pathlib").Path(SRC), 3)
plain_extend = Sandbox._extend
def extend(msg, *a):  # says when the harness made its inputs: next, the endless solve()
    print(json.dumps({{"stage": msg.get("stage")}}), flush=True)
    return plain_extend(msg, *a)
Sandbox._extend = staticmethod(extend)
def run():
    sb = Sandbox("cpu", {{"OMP_NUM_THREADS": "1"}})
    sb.start()
    print(json.dumps({{"started": sb.started, "zygotes": sorted(zygote.pids()),
                      "sandbox": sb.proc.pid, "harness": sb.host_pid}}), flush=True)
    sb.run(job(art, __import__("pathlib").Path(SRC), {ref!r}), timeout_s=600)
if {main}:
    run()
else:
    t = threading.Thread(target=run)
    t.start()
    t.join()
"""


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("how, main", [("forked", True), ("forked", False), ("plain", True),
                                       ("plain", False)])
def test_a_harness_in_an_endless_call_dies_with_its_owner(tmp_path, how, main):
    """The process that owns a sandbox (a device actor, ``kopt preflight``) is SIGKILLed
    while its harness spins in a candidate's endless ``solve()`` (faulty.cpp MODE 3): the
    harness, its sandbox and its zygote are gone soon after, whether the sandbox was made
    in the owner's main thread or another one. A plain start's harness made from another
    thread spun on for ever (its parent-death signal follows the starting thread, which a
    thread pool's end can take early; red-team round 13): every harness now also ends when
    its job pipe's last writer is gone."""
    script = OWNER.format(root=str(ROOT), tests=str(ROOT / "tests"), src=str(SRC),
                          tmp=str(tmp_path), ref=str(FIXTURES / "faulty" / "ref.py"),
                          main=main)
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                         env={**os.environ, "KOPT_ZYGOTE": "1" if how == "forked" else "0"})
    try:
        got = json.loads(p.stdout.readline())
        for line in p.stdout:  # its inputs are made: the endless call comes next
            if json.loads(line).get("stage") == "prepared":
                break
        time.sleep(1.0)  # (the call starts within ms; a kill before it would prove less)
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    assert got["started"].split(":")[0] == how
    pids = [*got["zygotes"], got["sandbox"], got["harness"]]
    assert all(isinstance(x, int) for x in pids) and len(got["zygotes"]) == (how == "forked")
    deadline = time.monotonic() + 60
    while any(map(_alive, pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = [x for x in pids if _alive(x)]
    for x in left:  # a failure must not leave a harness spinning beside the rest of the suite
        os.killpg(x, signal.SIGKILL) if x == got["sandbox"] else os.kill(x, signal.SIGKILL)
    assert not left, left


def test_kopt_env_says_how_harnesses_start(monkeypatch):
    """``kopt env``'s ``harness_start``: CPU harnesses forked (here: root, namespaces) unless
    ``KOPT_ZYGOTE=0``; GPU harnesses the plain way."""
    from workers import envinfo

    monkeypatch.delenv("KOPT_ZYGOTE", raising=False)
    assert envinfo.collect()["harness_start"] == (
        "CPU: forked from a zygote that imported torch once; GPU: plain (python -m "
        "workers.harness in its sandbox)" if ISOLATED.kind in ("namespaces", "none") else
        f"CPU: plain (a harness under {ISOLATED.kind} starts the plain way); GPU: plain "
        "(python -m workers.harness in its sandbox)")
    monkeypatch.setenv("KOPT_ZYGOTE", "0")
    assert envinfo.collect()["harness_start"].startswith("CPU: plain (KOPT_ZYGOTE=0 is set)")


def test_a_zygote_that_does_not_answer_is_dropped_and_the_harness_starts_the_plain_way(
        monkeypatch, tmp_path):
    """A zygote whose answer does not come in time (it could come late, as the answer to
    the next request) is closed and never asked again; the harness then starts the plain
    way, says why, and runs its job; the next start gets a zygote of its own again."""
    from workers import zygote

    monkeypatch.setenv("KOPT_ZYGOTE", "1")
    real, asked = zygote.Zygote.fork, []

    def silent(self, req, fds):
        asked.append(self.proc.pid)
        raise TimeoutError("timed out")

    monkeypatch.setattr(zygote.Zygote, "fork", silent)
    sb = Sandbox("cpu", {"OMP_NUM_THREADS": "1", "ZYGOTE_TEST_MARK": "silent"})
    try:
        sb.start()
        assert sb.started == "plain: timed out" and len(asked) == 1
        assert asked[0] not in zygote.pids() and not _alive(asked[0])
        res = sb.run(job(artifact(tmp_path, SRC, 0), SRC, FIXTURES / "faulty" / "ref.py"),
                     timeout_s=30)
        assert res["status"] == "ok", res
        monkeypatch.setattr(zygote.Zygote, "fork", real)
        sb.kill()
        sb.start()
        assert sb.started == "forked" and asked[0] not in zygote.pids()
    finally:
        sb.close()


def test_a_sandbox_with_writable_host_folders_starts_its_harness_the_plain_way():
    """With ``KOPT_SANDBOX_WRITABLE`` a sandbox writes host folders, where a zygote (outside
    every sandbox) could find files a candidate rewrote (red-team round 13 rewrote the
    zygote's native.c between its copy and the compiler, under another sandbox's scratch on
    the host's /tmp, and ran as root unconfined): such a harness is never forked."""
    from workers.isolation import Isolation

    sb = Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
    sb.isolation = Isolation(ISOLATED.kind, ISOLATED.prefix, writable=("/var/tmp",))
    try:
        sb.start()
        assert sb.started == ("plain: KOPT_SANDBOX_WRITABLE is set (a sandbox writes host "
                              "folders; a zygote works outside any sandbox)")
    finally:
        sb.close()


def test_a_zygote_with_a_running_harness_is_never_closed_to_make_room(monkeypatch, tmp_path):
    """One owner keeps two zygotes; a third import environment closes the least recently
    used one, but never one whose harness still runs (closing it killed that harness:
    red-team round 13)."""
    monkeypatch.setenv("KOPT_ZYGOTE", "1")
    boxes = [Sandbox("cpu", {"OMP_NUM_THREADS": "1", "KOPT_ZYGOTE_TEST_KEY": str(i)})
             for i in range(3)]
    try:
        for sb in boxes:
            sb.start()
            assert sb.started == "forked"
        assert [sb.proc.poll() for sb in boxes] == [None, None, None]
        res = boxes[0].run(job(artifact(tmp_path, SRC, 0), SRC, FIXTURES / "faulty" / "ref.py"),
                           timeout_s=30)
        assert res["status"] == "ok" and boxes[0].restarts == 0, res
    finally:
        for sb in boxes:
            sb.close()


_DRIVER = """
import os, signal
from workers import zygote
from workers.sandbox import Sandbox
box = Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
box.start()
z = next(iter(zygote._ZYGOTES.values()))
print(z.tmp, z.proc.pid, box.host_pid, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.skipif(not isolation.available().isolated, reason="forks need the sandbox")
def test_a_zygote_whose_process_died_removes_its_folder_and_ends_its_forks():
    """The process that started a zygote killed (SIGKILL: a device actor that Ray ends):
    the zygote, told by its parent-death signal (SIGTERM), kills its forked harnesses and
    removes its own folder (a new user found an empty ``/tmp/kopt-zygote-*`` after every
    sweep), then ends."""
    out = subprocess.run([sys.executable, "-c", _DRIVER], capture_output=True, text=True,
                         cwd=ROOT, timeout=300, env={**os.environ, "KOPT_ZYGOTE": "1"})
    assert out.returncode == -signal.SIGKILL, out.stderr
    folder, zpid, hpid = out.stdout.split()
    deadline = time.monotonic() + 60  # a condition waited for, not a timing
    while time.monotonic() < deadline and (
            os.path.exists(folder) or _alive(int(zpid)) or _alive(int(hpid))):
        time.sleep(0.1)
    left = {"folder": os.listdir(folder) if os.path.exists(folder) else None,
            "zygote": _alive(int(zpid)), "harness": _alive(int(hpid))}
    assert left == {"folder": None, "zygote": False, "harness": False}



def test_a_device_actor_closes_its_idle_zygotes_when_it_shuts_down():
    """A device actor's zygote, left to its parent's death, got SIGKILL in a Ray worker
    (Ray kills a worker's child processes when it exits) and left its empty
    ``kopt-zygote-`` folder in /tmp after every sweep: the actor's shutdown closes its
    idle zygotes, folders and all."""
    code = (
        "import os\n"
        "from workers import zygote\n"
        "from workers.device_actor import DeviceActor\n"
        "a = DeviceActor('cpu', spares=0)\n"
        "tmps = [z.tmp for z in zygote._ZYGOTES.values()]\n"
        "assert a.sandbox.started == 'forked' and tmps and all(map(os.path.isdir, tmps))\n"
        "a.shutdown()\n"
        "print([os.path.exists(t) for t in tmps], len(zygote._ZYGOTES))\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip() == "[False] 0", p.stdout

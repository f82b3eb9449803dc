"""Harnesses started before Ray (workers.prestart) and taken over by a sandbox, and the
quick stop of the embedded Ray (kopt.run.raystop): the cold
start-up costs measured on an H200 host 2026-12-01."""

import contextlib
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

from conftest import FIXTURES, ROOT, write_sweep
from kopt.core.spec import load_sweep
from workers.isolation import decode_exit
from workers.prestart import STATUS, Prestarter
from workers.reap import pid_alive
from workers.sandbox import Sandbox


@pytest.fixture
def prestarted():
    pre = Prestarter("cpu", ["0"])
    yield pre
    pre.close()


def test_a_prestarted_harness_is_taken_over_and_judges_as_its_own(tmp_path, prestarted):
    """The adopted harness runs candidates; one that segfaults it is described by its
    signal (the exit status the prestarting process reaped), and the sandbox then starts a
    harness of its own."""
    pre = prestarted.started["0"]
    sb = Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
    try:
        assert sb.adopt(pre) and sb.adopted
        assert sb.pid == pre.pid and sb.info["backend"] == "cpu" and sb.info["multiprocessors"] == 1
        assert sb.log == pre.log
        src, ref = FIXTURES / "faulty" / "faulty.cpp", FIXTURES / "faulty" / "ref.py"
        ok = sb.run(job(artifact(tmp_path, src, 0), src, ref), timeout_s=10)
        assert ok["status"] == "ok" and ok["max_abs_err"] == 0.0
        assert sb.pid == pre.pid and sb.restarts == 0
        crash = sb.run(job(artifact(tmp_path, src, 2), src, ref), timeout_s=10)
        assert crash["status"] == "crashed" and "killed by SIGSEGV" in crash["error"]
        # the reaper's record of the exit: the harness's own, or its sandbox's code for it
        status = int((Path(pre.folder) / STATUS).read_text())
        assert decode_exit(status, pre.isolation) == -signal.SIGSEGV
        again = sb.run(job(artifact(tmp_path, src, 0), src, ref), timeout_s=10)
        assert again["status"] == "ok" and sb.pid not in (None, pre.pid)
        assert sb.restarts == 1
    finally:
        sb.close()


def test_an_adopted_harness_is_timed_by_its_cgroups_cpu_time(tmp_path, prestarted):
    """The outside clock reads a CPU device's harness's CPU time from its cgroup
    (workers.sandbox ``outside_cpu_ms``); a harness started before Ray is in its
    prestarter's cgroup, and its adopter reads that one. It read the wall clock before
    (the adopter had no cgroup object), which another process's load lengthens: a patched
    clock's contest was TIED, not suspect, beside a second test suite."""
    from workers import cgroup
    from workers.device_actor import DeviceActor

    cg, why = cgroup.make()
    if cg is None:
        pytest.skip(f"no cgroup can be made here: {why}")
    cg.remove()
    pre = prestarted.started["0"]
    assert pre.cgroup_dirs and all(os.path.isdir(d) for d in pre.cgroup_dirs)
    dev = DeviceActor("cpu", 1, None, {"cpu": pre})
    try:
        assert dev.sandbox.adopted and dev.sandbox.pid == pre.pid
        src, ref = FIXTURES / "faulty" / "faulty.cpp", FIXTURES / "faulty" / "ref.py"
        art = Path(artifact(tmp_path, src, 0))
        j = {**job(str(art), src, ref), "build_id": art.parent.name}
        res = dev.clock(j, 20, art.read_bytes())
        assert res["status"] == "ok" and res["outside_cpu_ms"] > 0, res
    finally:
        dev.shutdown()


def test_a_process_that_reaches_the_socket_first_does_not_take_the_harness_over():
    """The harness's socket is a file any process of the user can connect to: one that
    connected before the device actor used to be the harness's only peer (forged medians,
    named best at 14x in a red-team trial). The harness closes connections that do not send
    its token (a line; the driver hands the token to the actor, not to the socket's folder)
    and serves the one that does."""
    import socket

    pre_r = Prestarter("cpu", ["0"])
    try:
        pre = pre_r.started["0"]
        assert len(pre.token) == 32
        path = str(Path(pre.folder) / "sock")
        silent, wrong = socket.socket(socket.AF_UNIX), socket.socket(socket.AF_UNIX)
        silent.connect(path)
        silent.close()  # connected, sent nothing
        wrong.connect(path)
        wrong.sendall(b"0" * 32 + b"\n")
        sb = Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
        try:
            assert sb.adopt(pre) and sb.adopted and sb.pid == pre.pid
        finally:
            sb.close()
        assert wrong.recv(16) == b""  # refused: closed without an answer
        wrong.close()
    finally:
        pre_r.close()


def test_an_actor_does_not_adopt_a_socket_that_cannot_prove_the_token(tmp_path):
    """The other way round: a process that put a socket where the actor looks answers with a
    hello like a harness's but without the proof (workers.prestart.proof) of the token the
    driver started its harness with: the actor does not take it over, kills nothing, and its
    next job starts a harness of its own."""
    import socket
    import threading
    from multiprocessing.connection import Connection

    from workers.harness import answer
    from workers.prestart import Prestarted

    folder = tmp_path / "fake"
    folder.mkdir()
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(folder / "sock"))
    listener.listen(1)
    got = []

    def fake() -> None:
        conn, _ = listener.accept()
        got.append(conn.recv(64))
        c = Connection(conn.detach())
        answer(c, {"ready": True, "pid": 1, "info": {"backend": "cpu"}})
        got.append(c.poll(30))  # held open until the actor lets go

    t = threading.Thread(target=fake, daemon=True)
    t.start()
    sb = Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
    try:
        assert not sb.adopt(Prestarted(str(folder), os.getpid(), "cpu", token="ab" * 16))
        assert not sb.adopted and pid_alive(os.getpid())
        t.join(timeout=30)
        assert got[0] == b"ab" * 16 + b"\n"
    finally:
        sb.close()
        listener.close()


_IMPOSTOR = """
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1])
s.listen(1)
print("ready", flush=True)
s.settimeout(60)
conn, _ = s.accept()
conn.settimeout(10)
try:
    print(repr(conn.recv(64)), flush=True)
except OSError as e:
    print(type(e).__name__, flush=True)
"""


def test_the_token_goes_only_to_the_socket_the_driver_made():
    """A process that replaced the harness's socket with one of its own (the folder is the
    driver's, 0700, so a process of the driver's user) is sent nothing: the kernel names
    the process that made a socket listen (SO_PEERCRED), and the actor sends the token only
    where that is the driver that started the harness (``listener_pid``); before, it sent
    the token to whoever listened there, who could then prove it. The real socket's peer is
    the driver, and the actor takes that harness over."""
    import socket
    import subprocess
    import sys

    from workers import prestart

    pre_r = Prestarter("cpu", ["0"])
    try:
        pre = pre_r.started["0"]
        assert pre.listener_pid == os.getpid()
        path = str(Path(pre.folder) / "sock")
        s = socket.socket(socket.AF_UNIX)
        s.connect(path)
        assert prestart.peer_pid(s) == os.getpid()  # the harness's socket: the driver's
        s.close()
        os.rename(path, path + ".real")
        imp = subprocess.Popen([sys.executable, "-c", _IMPOSTOR, path], stdout=subprocess.PIPE,
                               text=True)
        try:
            assert imp.stdout.readline().strip() == "ready"
            assert prestart.connect(pre) is None
            assert imp.stdout.readline().strip() == "b''"  # closed, nothing sent
        finally:
            imp.kill()
            imp.wait(timeout=30)
        os.replace(path + ".real", path)
        sb = Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
        try:
            assert sb.adopt(pre) and sb.adopted
        finally:
            sb.close()
    finally:
        pre_r.close()


def test_a_prestarted_judge_is_the_devices_judge_and_makes_nothing_ahead(tmp_path):
    """A GPU run's prestarter starts each device's judge too (workers.prestart
    ``judges``, key ``judge_key``): a harness that makes none of the sweep's reference jobs
    ahead (no ``prepare.pkl`` beside it, where its device's harness has one). The device
    actor takes it over as its judge (in the background: its first contest waits for it)
    and judges a contest of two honest contenders with it, witness turns taken; the two
    harnesses are the prestarted two, and a prestarter without ``judges`` starts none."""
    from test_faults import PACK
    from test_turns import ROUNDS, contender

    from workers.device_actor import DeviceActor
    from workers.prestart import PREPARE, judge_key

    src, ref = FIXTURES / "faulty" / "faulty.cpp", FIXTURES / "faulty" / "ref.py"
    ahead = [{**job(artifact(tmp_path, src, 0), src, ref), "kind": "reference"}]
    pre = Prestarter("cpu", ["0"], ahead, judges=True)
    try:
        assert set(pre.started) == {"0", judge_key("0")} == {"0", "0/judge"}
        main, judge = pre.started["0"], pre.started[judge_key("0")]
        assert (Path(main.folder) / PREPARE).is_file()
        assert not (Path(judge.folder) / PREPARE).exists()
        assert main.pid != judge.pid and pid_alive(judge.pid)
        h, art_h = contender(tmp_path, PACK / "faults.cpp", {"MODE": 0}, "honest")
        o, art_o = contender(tmp_path / "o", PACK / "faults.cpp", {"MODE": 0}, "other")
        dev = DeviceActor("cpu", 1, None, {"cpu": main, judge_key("cpu"): judge})
        try:
            assert dev.sandbox.adopted and dev.sandbox.pid == main.pid
            res = dev.contest([h, o], ROUNDS, art_h, art_o)
            assert dev.judge().adopted and dev.judge().pid == judge.pid
            assert res["status"] == "ok", res
            assert re.fullmatch(r"\d+ witness turns each", res["witness"]), res["witness"]
        finally:
            dev.shutdown()
        assert not pid_alive(judge.pid)  # closed with the actor, as a judge it started
    finally:
        pre.close()
    plain = Prestarter("cpu", ["0"])
    try:
        assert set(plain.started) == {"0"}
    finally:
        plain.close()


def test_a_prestarted_judge_out_of_the_actors_reach_is_closed_not_its_judge(monkeypatch):
    """Witness turns read the judge's memory (workers.witness ``reach``: ptrace access).
    A prestarted judge is not the actor's descendant, which Yama's ``ptrace_scope`` 1
    forbids: taken over anyway, every contest's first take would be unjudged. One the
    actor cannot reach is closed, and the actor's judge is one of its own."""
    from workers import witness
    from workers.device_actor import DeviceActor
    from workers.prestart import judge_key

    asked = []
    monkeypatch.setattr(witness, "reach", lambda pid, fd=True: (
        asked.append((pid, fd)) or "ptrace: Operation not permitted"))
    pre = Prestarter("cpu", ["0"], judges=True)
    try:
        judge = pre.started[judge_key("0")]
        dev = DeviceActor("cpu", 1, None, {judge_key("cpu"): judge})
        try:
            own = dev.judge()
            assert asked and asked[0][1] is False  # a CPU judge: its memory, no descriptor
            assert not own.adopted and own.pid != judge.pid
            deadline = time.monotonic() + 30
            while pid_alive(judge.pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not pid_alive(judge.pid), _tree(judge.pid)
        finally:
            dev.shutdown()
    finally:
        pre.close()


def test_a_gpu_run_prestarts_each_devices_judge_a_cpu_run_none(monkeypatch):
    """kopt.run.cluster ``prestart_sandboxes``: a CUDA run asks the prestarter for each
    GPU's judge too (``judges``), unless ``KOPT_PRESTART_JUDGE=0``; a CPU run does not (its
    judge forks from a zygote on demand). Each GPU Ray will see gets its harness."""
    from kopt.run import cluster

    asked = []
    monkeypatch.setattr(cluster, "Prestarter", lambda device, keys, prepare, judges: (
        asked.append((device, keys, judges))))
    monkeypatch.setattr(cluster, "local_gpu_count", lambda: 2)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    sweep = load_sweep(ROOT / "sweeps" / "vector_add")
    cluster.prestart_sandboxes(sweep, "cuda", 1)
    monkeypatch.setenv(cluster.JUDGE_ENV, "0")
    cluster.prestart_sandboxes(sweep, "cuda", 1)
    monkeypatch.delenv(cluster.JUDGE_ENV)
    cluster.prestart_sandboxes(sweep, "cpu", 2)
    assert asked == [("cuda", ["0", "1"], True), ("cuda", ["0", "1"], False),
                     ("cpu", ["0", "1"], False)]


def test_a_harness_nobody_takes_over_is_killed_and_its_folder_removed(prestarted):
    pre = prestarted.started["0"]
    assert pid_alive(pre.pid)
    prestarted.close()
    assert not pid_alive(pre.pid) and not os.path.exists(pre.folder)
    assert prestarted.started == {}


def test_a_dead_prestarted_harness_is_not_taken_over(prestarted):
    """A harness that died before the actor came: adopt says no, and the sandbox starts its
    own on the first job, as without a prestart."""
    pre = prestarted.started["0"]
    os.killpg(pre.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while not (Path(pre.folder) / STATUS).exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    sb = Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
    try:
        assert not sb.adopt(pre) and not sb.adopted
        assert sb.proc is None and sb.log != pre.log and sb.log.exists()
        sb.start()
        assert sb.pid not in (None, pre.pid)
    finally:
        sb.close()


LEAVE = """
import json, os, time
import ray
from kopt.run.cluster import ensure_ray
from kopt.run.raystop import leave_ray
from workers.reap import pid_alive
ensure_ray()
node = ray._private.worker._global_node
procs = {k: [i.process for i in v] for k, v in node.all_processes.items()}
worker = ray.get(ray.remote(num_cpus=1)(lambda: os.getpid()).remote())
leave_ray()
left = {k: [p.poll() is None for p in v] for k, v in procs.items()}
t = time.monotonic()
while pid_alive(worker) and time.monotonic() - t < 5:
    time.sleep(0.05)
ensure_ray()  # Ray can start again in this process
print(json.dumps({"kinds": sorted(procs), "left": left, "worker": pid_alive(worker),
                  "again": ray.is_initialized()}))
leave_ray()
"""


def test_leave_ray_stops_every_process_of_the_embedded_instance():
    """kopt.run.raystop.leave_ray stops what ray.init started -- all of it gone when it
    returns, the raylet's workers right after -- and Ray can start again (in a process of
    its own: this one may hold another test's Ray)."""
    out = subprocess.run([sys.executable, "-c", LEAVE], capture_output=True, text=True,
                         cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert {"raylet", "gcs_server"} <= set(got["kinds"])
    assert not any(alive for v in got["left"].values() for alive in v), got["left"]
    assert got["worker"] is False and got["again"] is True


def _counting_sweep(tmp_path, body="    return 2 * x"):
    """A CPU sweep whose ref.py logs each reference() call to calls.log in
    ``$KOPT_TEST_CALLS`` when set (a folder the test keeps writable in the sandbox: its
    scratch folder is a tmpfs of its own, unseen from here)."""
    yaml = "kernel: k.cpp\ndims: [{N: 64}]\nargs: {x: [N], y: [N]}\n"
    return write_sweep(tmp_path / "count", yaml, {
        "k.cpp": 'extern "C" void solve(const float* x, float* y, int N) '
                 '{ for (int i = 0; i < N; ++i) y[i] = 2 * x[i]; }',
        "ref.py": "import os\ndef reference(x, N):\n"
                  "    if os.environ.get('KOPT_TEST_CALLS'):\n"
                  "        open(os.path.join(os.environ['KOPT_TEST_CALLS'], 'calls.log'), 'a')"
                  ".write('call\\n')\n"
                  f"{body}\n"}), "calls.log"


@pytest.fixture
def calls_folder(tmp_path, monkeypatch):
    """A folder the sandbox leaves writable (``KOPT_SANDBOX_WRITABLE``), named to ref.py
    in ``$KOPT_TEST_CALLS``."""
    from workers import isolation

    calls = tmp_path / "calls"
    calls.mkdir()
    monkeypatch.setenv("KOPT_SANDBOX_WRITABLE", str(calls))
    monkeypatch.setenv("KOPT_TEST_CALLS", str(calls))
    isolation.available.cache_clear()
    yield calls
    monkeypatch.undo()
    isolation.available.cache_clear()


def test_the_reference_check_is_made_ahead_and_found_made(tmp_path, calls_folder):
    """prestart_sandboxes hands each harness the sweep's reference checks: their inputs and
    reference outputs are made before the actor takes the harness over, and the actor's
    own reference check (the same job) finds them made: reference() is not called again."""
    from kopt.run.cluster import prestart_sandboxes

    d, log = _counting_sweep(tmp_path)
    sweep = load_sweep(d)
    pre = prestart_sandboxes(sweep, "cpu", 1)
    assert pre is not None and list(pre.started) == ["0"] and len(pre.prepare) == 1
    assert pre.started["0"].isolation.writable == (str(calls_folder),)
    log = calls_folder / log
    from workers.harness import MAX_TIMED_SETS, N_UNSEEN

    # one call per input set: the seen ones a 64-element problem's timed calls cycle
    # through on a CPU (workers.harness timed_sets: the most), and the held-back ones
    sets = MAX_TIMED_SETS + N_UNSEEN

    sb = Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
    try:
        assert sb.adopt(pre.started["0"])
        t0 = time.time()  # made while the harness waits to be taken over, or just after
        while (log.read_text().count("call") if log.exists() else 0) < sets:
            assert time.time() - t0 < 60
            time.sleep(0.05)
        res = sb.run({**pre.prepare[0], "prepare_only": True}, timeout_s=30)
        assert res["status"] == "ok" and res["outputs"] == {"y": [64]}
        assert log.read_text().count("call") == sets  # none for the job
    finally:
        sb.close()
        pre.close()


def test_a_reference_that_fails_ahead_is_left_to_the_jobs_own_preparation(tmp_path):
    """A ref.py that raises while the prestarted harness makes its outputs ahead: the
    harness is taken over all the same, and the job's own preparation reports the error as
    without a prestart."""
    from kopt.run.cluster import prestart_sandboxes

    d, _ = _counting_sweep(tmp_path, "    raise ValueError('bad ref')")
    pre = prestart_sandboxes(load_sweep(d), "cpu", 1)
    sb = Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
    try:
        assert sb.adopt(pre.started["0"])
        res = sb.run({**pre.prepare[0], "prepare_only": True}, timeout_s=30)
        assert res["status"] == "error" and "bad ref" in res["error"]
        assert "made ahead failed" in pre.started["0"].log.read_text()
    finally:
        sb.close()
        pre.close()


def test_a_reference_that_hangs_ahead_costs_what_it_costs_without_a_prestart(tmp_path):
    """A ref.py that never returns while the prestarted harness makes its outputs ahead:
    the actor waited 180 s for a hello that never came before starting a harness of its
    own (that hung again). Now the harness is taken over at once and the first job times
    out within its preparation budget, naming ref.py."""
    from kopt.run.cluster import prestart_sandboxes

    d, _ = _counting_sweep(tmp_path, "    import time; time.sleep(3600)")
    pre = prestart_sandboxes(load_sweep(d), "cpu", 1)
    sb = Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
    try:
        t0 = time.time()
        assert sb.adopt(pre.started["0"]) and time.time() - t0 < 30
        res = sb.run({**pre.prepare[0], "prepare_only": True}, timeout_s=1,
                     prepare_timeout_s=3)
        assert res["status"] == "timeout" and res["wall_s"] < 10, res
        assert "inputs()/reference() did not return within 3 s" in res["error"]
    finally:
        sb.close()
        pre.close()


def test_a_cpu_harness_sees_no_gpu():
    """A CPU candidate must not do its work on a GPU of the host (its clock is the CPU's):
    CPU harnesses, prestarted or the sandbox's own, get CUDA_VISIBLE_DEVICES empty (Ray
    leaves it unset for an actor without GPUs: every GPU was visible)."""
    from workers.prestart import harness_env

    assert harness_env("cpu", "0")["CUDA_VISIBLE_DEVICES"] == ""
    assert Sandbox("cpu", {"CUDA_VISIBLE_DEVICES": "0"}).env["CUDA_VISIBLE_DEVICES"] == ""
    assert harness_env("cuda", "3")["CUDA_VISIBLE_DEVICES"] == "3"
    assert Sandbox("cuda", {"CUDA_VISIBLE_DEVICES": "3"}).env["CUDA_VISIBLE_DEVICES"] == "3"


ADOPTER = """
import pickle, sys, time
from workers.prestart import Prestarted
from workers.sandbox import Sandbox
sb = Sandbox("cpu")
ok = sb.adopt(Prestarted(sys.argv[1], int(sys.argv[2]), "cpu", token=sys.argv[4]))
sb.w.send(("run", pickle.loads(bytes.fromhex(sys.argv[3]))))  # a candidate that never returns
print("adopted" if ok else "no", flush=True)
time.sleep(120)
"""


def test_a_prestarted_harness_dies_with_the_actor_that_took_it_over(prestarted, tmp_path):
    """Its parent is the driver, so no parent-death signal ties it to the device actor; a
    harness left spinning in a hung candidate after its actor died would hold the device
    and disturb the replacement actor's timings. It watches the process that connected."""
    import pickle

    d = write_sweep(tmp_path / "hang", "kernel: k.cpp\ndims: [{N: 8}]\n", {
        "k.cpp": 'extern "C" void solve(const float* x, float* y, int N) '
                 '{ volatile int s = 1; while (s) {} }',
        "ref.py": "def reference(x, N):\n    return x\n"})
    j = {**job(artifact(tmp_path, d / "k.cpp", 0, "k.cpp"), d / "k.cpp", d / "ref.py"),
         "dims": {"N": 8}}
    pre = prestarted.started["0"]
    adopter = subprocess.Popen([sys.executable, "-c", ADOPTER, pre.folder, str(pre.pid),
                                pickle.dumps(j).hex(), pre.token], stdout=subprocess.PIPE,
                               text=True,
                               cwd=ROOT)
    try:
        assert adopter.stdout.readline().strip() == "adopted"
        time.sleep(2)  # the harness is inside the endless solve() by now
        assert pid_alive(pre.pid)
        adopter.kill()
        adopter.wait(timeout=30)
        # it held the device for ever before; the chain (the watchdog's wake-up, the
        # kernel's teardown of a process holding torch, the jail's reap, unshare's exit) is
        # well under a second when idle, but once outlasted 10 s in a fresh clone's suite
        # on a loaded 2-core machine: a minute, and what is left named if it fails
        deadline = time.monotonic() + 60
        while pid_alive(pre.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not pid_alive(pre.pid), _tree(pre.pid)
    finally:
        if adopter.poll() is None:
            adopter.kill()


def _tree(pid: int) -> str:
    """Process ``pid`` and its descendants: pid, state, name and wait channel of each (for
    an assertion message)."""
    lines, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            stat = Path(f"/proc/{p}/stat").read_text()
            wchan = Path(f"/proc/{p}/wchan").read_text()
        except OSError:
            continue
        name, rest = stat[stat.find("(") + 1:stat.rfind(")")], stat.rsplit(")", 1)[1].split()
        lines.append(f"{p} {rest[0]} {name} {wchan}")
        for task in Path(f"/proc/{p}/task").glob("*/children"):
            with contextlib.suppress(OSError):
                todo += [int(c) for c in task.read_text().split()]
    return "; ".join(lines) or f"{pid}: gone"


PARENT_KILLER = """
import json, sys
from test_harness import artifact, job
from workers.prestart import Prestarter
from workers.sandbox import Sandbox
tmp, src, ref = (__import__("pathlib").Path(a) for a in sys.argv[1:4])
pre = Prestarter("cpu", ["0"])
sb = Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
adopted = sb.adopt(pre.started["0"])
killer = sb.run(job(artifact(tmp, src, 1, "k.cpp"), src, ref), timeout_s=10)
again = sb.run(job(artifact(tmp, src, 0, "k.cpp"), src, ref), timeout_s=10)
print(json.dumps({"adopted": adopted, "killer": killer, "again": again["status"],
                  "restarts": sb.restarts}))
sb.close()
pre.close()
"""


@pytest.mark.parametrize("isolated", [True, False])
def test_a_candidate_that_kills_its_parent_does_not_kill_the_driver(tmp_path, isolated):
    """A prestarted harness's parent was the process that prestarted it -- the driver -- so
    a candidate calling kill(getppid(), SIGKILL) ended the whole sweep (no line, Ray left
    behind) instead of being recorded as a crash. Unsandboxed (``KOPT_ISOLATION=none``),
    its parent is a reaper: the candidate crashes with SIGKILL, and the next candidate runs
    in a harness of the sandbox's own. Sandboxed, its parent is the PID namespace's first
    process, which a signal from inside cannot kill: the kill does nothing, and the
    candidate's correct output is judged ``ok`` in the same harness. The candidate waits
    0.5 s after its kill: the harness dies on its parent's death (PR_SET_PDEATHSIG), and a
    job that ends first answers `ok` before it does (a whole job takes milliseconds here)."""
    d = write_sweep(tmp_path / "ppid", "kernel: k.cpp\n", {
        "k.cpp": '#include <signal.h>\n#include <unistd.h>\n'
                 'extern "C" void solve(const float* x, float* y, int N) {\n'
                 '  static int calls = 0;  // once, then time for the parent\'s death to land\n'
                 '  if (MODE == 1 && calls++ == 0) { kill(getppid(), SIGKILL); usleep(500000); }\n'
                 '  for (int i = 0; i < N; ++i) y[i] = 2.0f * x[i];\n}\n',
        "ref.py": "def reference(x, N):\n    return (2.0 * x.double()).float()\n"})
    out = subprocess.run([sys.executable, "-c", PARENT_KILLER, str(tmp_path), str(d / "k.cpp"),
                          str(d / "ref.py")], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(
                             [str(ROOT), str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")]),
                              "KOPT_ISOLATION": "namespaces" if isolated else "none"},
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["adopted"] is True
    if isolated:
        assert (got["killer"]["status"], got["restarts"]) == ("ok", 0)
    else:
        assert got["killer"]["status"] == "crashed"
        assert "killed by SIGKILL" in got["killer"]["error"]
        assert got["restarts"] == 1
    assert got["again"] == "ok"


def test_an_interrupted_prestart_leaves_no_harness_and_no_folder(monkeypatch):
    """Ctrl-C or SIGTERM (kopt.driver.sweep.Terminated) while the second harness starts: the
    Prestarter never reached the sweep's clean-up, so the first harness ran on until the
    driver exited and its /tmp/kopt-prestart-* folder stayed. Both are gone now."""
    real, started = Prestarter._start, []

    def start_then_interrupt(self, key, ahead=True):
        if key == "1":
            raise KeyboardInterrupt
        started.append(real(self, key, ahead))
        return started[-1]

    monkeypatch.setattr(Prestarter, "_start", start_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        Prestarter("cpu", ["0", "1"])
    assert len(started) == 1
    deadline = time.monotonic() + 5  # SIGKILLed and reaped by close(): at once
    while pid_alive(started[0].pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(started[0].pid)
    assert not os.path.exists(started[0].folder)


DRIVER = """
import sys, time
from workers.prestart import Prestarter
pre = Prestarter("cpu", ["0"])
p = pre.started["0"]
print(p.folder, p.pid, flush=True)
time.sleep(120)
"""


def test_a_killed_driver_leaves_no_harness_and_no_folder(tmp_path):
    """A driver killed outright (SIGKILL: no clean-up of its own) left its prestarted
    harness's folder in /tmp (seen after CI runs: the tests that kill drivers). Its reaper
    gets SIGTERM with the driver's death, kills the harness and removes the folder."""
    driver = subprocess.Popen([sys.executable, "-c", DRIVER], stdout=subprocess.PIPE,
                              text=True, cwd=ROOT)
    try:
        folder, pid = driver.stdout.readline().split()
        assert os.path.isdir(folder) and pid_alive(int(pid))
        driver.kill()
        driver.wait(timeout=30)
        # the reaper's chain after the driver's death, as in the adopted harness's test
        # above: well under a second when idle, a minute for a loaded 2-core machine
        deadline = time.monotonic() + 60
        while (os.path.exists(folder) or pid_alive(int(pid))) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not pid_alive(int(pid)) and not os.path.exists(folder)
    finally:
        if driver.poll() is None:
            driver.kill()


def test_closing_kills_no_process_group_that_is_no_longer_its_harness():
    """A prestarted harness that ended was reaped by its reaper; its pid can then be
    another process group's (pid_max is 32768 on the CI machine), and ``close`` killed that
    group: a test of another xdist worker had its stand-in process killed. ``close`` kills a
    harness only while it is its reaper's child."""
    import subprocess

    from workers.prestart import Prestarter

    reaper = subprocess.Popen(["sleep", "0.1"])
    stranger = subprocess.Popen(["sleep", "30"], start_new_session=True)
    pre = object.__new__(Prestarter)
    pre._procs, pre._harnesses = [reaper], {reaper.pid: stranger.pid}
    pre._threads, pre._folders, pre.started = [], [], {}
    try:
        pre.close()
        assert stranger.poll() is None
    finally:
        stranger.kill()
        stranger.wait()

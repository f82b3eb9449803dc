"""The warm queue (issue 14.3) on a real local Ray cluster, through the command line as a user
runs it: `kopt serve start` (its own Ray head, two warm CPU device actors), two
`kopt sweep --queue` submitted at once (each its own run id, every row stored, no two jobs
on one device at the same time, neither waiting for the other to finish), a device actor
killed mid-sweep (Ray restarts it, the sweep completes), `kopt serve stop` (actors and head
gone)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from conftest import FIXTURES

N_CANDIDATES = 6


def _env(cache: Path) -> dict[str, str]:
    # the service's state file lives under KOPT_CACHE: this module's own
    return {**os.environ, "KOPT_CACHE": str(cache), "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_DEDUP_LOGS": "0"}


def _kopt(env: dict, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kopt.cli", *args], capture_output=True,
                          text=True, env=env, timeout=timeout)


def _sweep_dir(root: Path, name: str) -> Path:
    """The cluster fixture (a fixed ~10 ms call) cut to 6 candidates of 10 samples."""
    d = root / name
    shutil.copytree(FIXTURES / "cluster", d)
    spec = d / "sweep.yaml"
    text = spec.read_text()
    for old, new in (("U: [1, 2, 3, 4, 5, 6, 7, 8], V: [1, 2, 3]", "U: [1, 2, 3], V: [1, 2]"),
                     ("min_samples: 40, max_samples: 40", "min_samples: 10, max_samples: 10")):
        assert old in text
        text = text.replace(old, new)
    spec.write_text(text + "reference_timing: false\n")
    src = d / "spin.cpp"  # a source of its own: its builds are its own, never another's hits
    src.write_text(f"// sweep {name}\n" + src.read_text())
    return d


def _submit(env: dict, sweep: Path, store: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "kopt.cli", "sweep", str(sweep), "--queue",
                             "--store", str(store)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)


def _query(store: Path, table: str, sql: str) -> list[tuple]:
    files = [str(f) for f in store.glob(f"{table}/**/*.parquet")]
    con = duckdb.connect()
    try:
        return con.execute(sql.replace("T", f"read_parquet({files!r}, union_by_name=true)")
                           ).fetchall()
    finally:
        con.close()


ACTOR = """
import json, sys, ray
from kopt.service import NAMESPACE, read_state, use_token
addr = read_state()["address"]
use_token(addr)
ray.init(address=addr, logging_level="ERROR", log_to_driver=False)
for line in sys.stdin:  # "ping NAME...", "harness NAME..." or "kill NAME..."
    what, *names = line.split()
    actors = [ray.get_actor(n, namespace=NAMESPACE) for n in names]
    if what == "kill":
        for a in actors:
            ray.kill(a, no_restart=False)  # as a crash would: Ray restarts it
        print("[]", flush=True)
        continue
    if what == "harness":
        print(json.dumps([s["harness_pid"] for s in ray.get([a.stats.remote() for a in actors],
                                                             timeout=120)]), flush=True)
        continue
    print(json.dumps(ray.get([a.ping.remote() for a in actors], timeout=120)), flush=True)
"""


class Actors:
    """A Ray driver of its own that pings (pids) or kills the service's device actors on
    request, attached once so that a kill lands at once."""

    def __init__(self, env: dict):
        self.p = subprocess.Popen([sys.executable, "-c", ACTOR], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True, env=env)

    def ask(self, what: str, *names: str) -> list[int]:
        self.p.stdin.write(f"{what} {' '.join(names)}\n")
        self.p.stdin.flush()
        return json.loads(self.p.stdout.readline())

    def close(self) -> None:
        self.p.stdin.close()
        self.p.wait(timeout=60)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, killed and not yet reaped by init, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    cache = tmp_path_factory.mktemp("queue-cache")
    env = _env(cache)
    p = _kopt(env, "serve", "start", "--backend", "cpu", "--cpu-devices", "2", "--num-cpus",
              "4")
    state = cache / "service.json"
    try:
        assert p.returncode == 0, p.stdout + p.stderr[-3000:]
        assert "2 cpu device actors warm" in p.stdout and "), 2 builders" in p.stdout
        yield env, json.loads(state.read_text())
    finally:
        if state.exists():  # a test failed before `kopt serve stop`: stop its Ray head
            left = json.loads(state.read_text())
            if left.get("pgid") and _alive(left["pgid"]):
                os.killpg(left["pgid"], signal.SIGKILL)
            if left.get("temp_dir"):
                shutil.rmtree(left["temp_dir"], ignore_errors=True)


def test_status_of_a_started_service(service):
    env, state = service
    # trial 9: a second `kopt serve start` started a second Ray head and overwrote the record
    again = _kopt(env, "serve", "start", "--backend", "cpu", timeout=120)
    assert again.returncode == 2 and again.stderr.startswith(
        f"error: kopt serve start: the kopt service started here still runs at "
        f"{state['address']} (recorded in "), again.stderr
    assert json.loads((Path(env["KOPT_CACHE"]) / "service.json").read_text()) == state
    st = _kopt(env, "serve", "status", "--format", "json")
    assert st.returncode == 0, st.stderr[-2000:]
    status = json.loads(st.stdout)
    assert status["backend"] == "cpu" and status["address"] == state["address"]
    assert [d["state"] for d in status["devices"]] == ["idle", "idle"]
    # the 4 CPUs less the 2 CPU devices: 2 warm builders, none used yet
    assert status["builders"] == [{"name": f"kopt-builder-{k}", "state": "idle", "builds": 0}
                                  for k in (0, 1)]
    assert status["sweeps_served"] == 0


def test_two_sweeps_at_once_share_the_devices(service, tmp_path):
    env, state = service
    store = tmp_path / "store"
    procs = [_submit(env, _sweep_dir(tmp_path, name), store) for name in ("a", "b")]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[-3000:] for o in outs]
    rows = _query(store, "candidates", "select run_id, status, device_id, epoch(device_start),"
                  " epoch(device_end) from T")
    runs = sorted({r[0] for r in rows})
    assert len(runs) == 2 and all(f"run {r}" in "".join(outs) for r in runs)  # own run ids
    for r in runs:
        assert [x[1] for x in rows if x[0] == r] == ["ok"] * N_CANDIDATES
    _shared_fairly(rows, runs)
    opts = _query(store, "runs", "select distinct run_id, json_extract_string(options, "
                  "'$.queue') from T")
    assert sorted(opts) == [(r, state["address"]) for r in runs]  # the run says: warm
    status = json.loads(_kopt(env, "serve", "status", "--format", "json").stdout)
    assert status["sweeps_served"] == 2 and status["sweeps_running"] == []
    assert sum(d["jobs"] for d in status["devices"]) == 2 * N_CANDIDATES
    assert [d["restarts"] for d in status["devices"]] == [0, 0]  # each harness stayed warm
    # every build went to the service's warm builders (none to a Ray task of the sweep's)
    assert sum(b["builds"] for b in status["builders"]) == 2 * N_CANDIDATES


def test_a_device_actor_killed_mid_sweep_is_restarted_and_the_sweep_completes(service,
                                                                             tmp_path):
    env, _ = service
    store, actors = tmp_path / "store", Actors(env)
    before = actors.ask("ping", "kopt-device-0", "kopt-device-1")
    harness = actors.ask("harness", "kopt-device-0")[0]
    proc = _submit(env, _sweep_dir(tmp_path, "k"), store)
    while proc.poll() is None and not list(store.glob("candidates/**/*.parquet")):
        time.sleep(0.1)  # results land as they come: wait for the first rows
    actors.ask("kill", "kopt-device-0")  # as a crash would
    assert proc.poll() is None  # mid-sweep
    out = proc.communicate(timeout=600)[0]
    assert proc.returncode == 0, out[-3000:]
    statuses = [s for s, in _query(store, "candidates", "select status from T")]
    assert statuses == ["ok"] * N_CANDIDATES
    after = actors.ask("ping", "kopt-device-0", "kopt-device-1")
    actors.close()
    assert after[0] != before[0] and after[1] == before[1]  # restarted by Ray; 1 untouched
    assert not _alive(harness)  # the killed actor's harness died with it: never two timing


def _shared_fairly(rows: list[tuple], runs: list[str]) -> None:
    """One candidate at a time per device whichever sweep sent it, and neither sweep waited
    for the other to finish (their device time interleaved)."""
    for dev in {r[2] for r in rows}:
        spans = sorted((r[3], r[4]) for r in rows if r[2] == dev)
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), spans
    first = {r: min(x[3] for x in rows if x[0] == r) for r in runs}
    last = {r: max(x[4] for x in rows if x[0] == r) for r in runs}
    assert first[runs[0]] < last[runs[1]] and first[runs[1]] < last[runs[0]]


def test_stop_leaves_nothing_running(service):
    env, state = service
    actors = Actors(env)
    pids = actors.ask("ping", "kopt-device-0", "kopt-device-1", "kopt-builder-0",
                      "kopt-builder-1")
    actors.close()
    p = _kopt(env, "serve", "stop")
    assert p.returncode == 0, p.stderr[-2000:]
    assert ("kopt-device-0, kopt-device-1, kopt-builder-0, kopt-builder-1, kopt-service"
            in p.stdout)
    assert not any(_alive(pid) for pid in pids)
    assert not _alive(state["pgid"])  # the Ray head `kopt serve start` started
    assert not Path(state["temp_dir"]).exists()  # and its folder (Ray's layout: kopt's own)
    again = _kopt(env, "serve", "status")
    assert again.returncode == 2
    assert again.stderr.strip().endswith("no kopt service is recorded in "
                                         f"{Path(env['KOPT_CACHE']) / 'service.json'}; start "
                                         "one with `kopt serve start`, or pass --address "
                                         "HOST:PORT of one")


def test_queue_without_a_service_says_how_to_start_one(tmp_path):
    env = _env(tmp_path / "cache")
    p = _kopt(env, "sweep", str(_sweep_dir(tmp_path, "q")), "--queue", "--store",
              str(tmp_path / "store"), timeout=120)
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr[-2000:]
    assert p.stderr == (f"error: --queue: no kopt service is recorded in {tmp_path}/cache/"
                        "service.json; start one with `kopt serve start`, or pass --address "
                        "HOST:PORT of one\n")
    assert not (tmp_path / "store").exists()


def test_serve_mistakes_are_one_line(tmp_path):
    env = _env(tmp_path / "cache")
    p = _kopt(env, "serve", "start", "--address", "127.0.0.1:1", "--num-cpus", "2", timeout=120)
    assert p.returncode == 2 and p.stderr == (
        "error: --num-cpus sizes the Ray head `kopt serve start` starts; with --address the "
        "cluster's own CPUs count: leave --num-cpus out\n")
    p = _kopt(env, "serve", "stop", "--address", "127.0.0.1:1", timeout=120)
    assert p.returncode == 2 and p.stderr == (
        "error: --address: no Ray head answers at 127.0.0.1:1; start one with `ray start "
        "--head`, or run `kopt serve start` without --address\n")
    # trial 9: the runner's own refusal (no CPU left for builds) was a SweepError traceback;
    # the Ray head it started is stopped again, and no service is recorded
    p = _kopt(env, "serve", "start", "--backend", "cpu", "--num-cpus", "1", timeout=240)
    assert p.returncode == 2 and p.stderr == (
        "error: --cpu-devices 1: the cluster's 1 CPUs leave none for builds beside its CPU "
        "devices; add CPUs\n"), p.stderr
    assert not (tmp_path / "cache" / "service.json").exists()
    # trial 13 N-D1: more CPUs than Ray accepts waited 65 s for a head that never started,
    # then blamed --address; now click refuses it at once, naming Ray's limit
    p = _kopt(env, "serve", "start", "--backend", "cpu", "--num-cpus", "99999999999999999999",
              timeout=60)
    assert p.returncode == 2 and "'--num-cpus': 99999999999999999999 is not in the range " \
        "1<=x<=100000000000000" in p.stderr, p.stderr
    assert "--address" not in p.stderr


def test_the_num_cpus_ceiling_is_rays():
    from ray._private.ray_constants import MAX_RESOURCE_QUANTITY

    from kopt.cli import RAY_MAX_RESOURCE

    assert RAY_MAX_RESOURCE == MAX_RESOURCE_QUANTITY


def test_a_second_serve_start_while_one_starts_is_refused(tmp_path):
    """Trial 13: two `kopt serve start` at once both started a Ray head and both recorded
    one. The second is refused at once while the first holds the start lock."""
    import fcntl

    env = _env(tmp_path / "cache")
    (tmp_path / "cache").mkdir()
    with open(tmp_path / "cache" / "service.lock", "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # a `serve start` in progress
        p = _kopt(env, "serve", "start", "--backend", "cpu", timeout=60)
    assert p.returncode == 2 and p.stderr == (
        "error: kopt serve start: another `kopt serve start` is starting the service here (it "
        f"holds {tmp_path / 'cache' / 'service.lock'}); wait for it, then `kopt serve "
        "status`\n"), p.stderr
    assert not (tmp_path / "cache" / "service.json").exists()

"""A real multi-node Ray cluster on this machine (`ray start`: a head and three worker
nodes; two declare device class ``a``, one class ``b``) running `kopt sweep --cluster`:
work spreads over both classes, a worker node killed mid-sweep loses nothing, and a
killed driver's run finishes with --resume without duplicates."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import pytest

from conftest import FIXTURES

RAY = shutil.which("ray")
ENV = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0",
       "RAY_DEDUP_LOGS": "0"}
WORKERS = [("a1", "a"), ("a2", "a"), ("b1", "b")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalCluster:
    """Nodes started with `ray start --block`, each in its own process group, so one node
    can be killed (SIGKILL to its group: raylet, object store, workers) and the rest
    torn down without `ray stop` (which would kill every Ray instance on the machine)."""

    def __init__(self, root: Path):
        self.root, self.port = root, _free_port()
        self.procs: dict[str, subprocess.Popen] = {}
        # each node its own --temp-dir (its session dir and sockets), short enough for
        # unix socket paths
        self.tmp = Path(tempfile.mkdtemp(prefix="kc", dir="/tmp"))

    def start(self, name: str, args: list[str]) -> None:
        log = open(self.root / f"{name}.log", "w")
        self.procs[name] = subprocess.Popen(
            [RAY, "start", "--block", "--disable-usage-stats", "--num-cpus=1",
             "--object-store-memory=100000000", *args,
            f"--temp-dir={self.tmp / name}"],
            stdout=log, stderr=subprocess.STDOUT, env=ENV, start_new_session=True)

    def up(self) -> None:
        self.start("head", ["--head", f"--port={self.port}", "--include-dashboard=false"])
        for name, cls in WORKERS:
            self.start(name, [f"--address=127.0.0.1:{self.port}",
                              f"--resources={json.dumps({f'kopt_class_{cls}': 1})}"])
        deadline = time.time() + 180
        while time.time() < deadline:
            if len(self.nodes()) == 1 + len(WORKERS):
                return
            time.sleep(2)
        raise RuntimeError("the test cluster did not come up: " + self.log_tail())

    def nodes(self) -> list[dict]:
        """Alive nodes (id, raylet socket) from a separate driver process."""
        addr = f"127.0.0.1:{self.port}"
        code = (f"import json, ray; ray.init(address={addr!r}, logging_level='ERROR'); "
                "print(json.dumps([{'id': n['NodeID'], 'sock': n['RayletSocketName']} "
                "for n in ray.nodes() if n['Alive']]))")
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env=ENV, timeout=120)
        return json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 else []

    def node_id(self, name: str) -> str:
        return next(n["id"] for n in self.nodes() if f"{self.tmp / name}/" in n["sock"])

    def kill(self, name: str) -> None:
        os.killpg(self.procs[name].pid, signal.SIGKILL)

    def down(self) -> None:
        for p in self.procs.values():
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(self.tmp, ignore_errors=True)

    def log_tail(self) -> str:
        return "".join((self.root / f"{n}.log").read_text()[-800:] for n in self.procs)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if RAY is None:
        pytest.fail("the `ray` command is not on PATH (it comes with `pip install ray`)")
    c = LocalCluster(tmp_path_factory.mktemp("raycluster"))
    try:
        c.up()
        yield c
    finally:
        c.down()


def _yaml(tmp_path: Path, port: int) -> Path:
    p = tmp_path / "ray_cluster.yaml"
    p.write_text(f"""cluster_name: kopt-ci
provider: {{type: local, head_ip: 127.0.0.1, worker_ips: [127.0.0.1]}}
auth: {{ssh_user: ci}}
head_start_ray_commands: ["ray start --head --port={port}"]
""")
    return p


def _sweep(tmp_path: Path, yaml: Path, store: Path, *extra: str) -> subprocess.Popen:
    sweep = tmp_path / "sweep"
    if not sweep.exists():
        shutil.copytree(FIXTURES / "cluster", sweep)
    return subprocess.Popen(
        [sys.executable, "-m", "kopt.cli", "sweep", str(sweep), "--cluster", str(yaml),
         "--store", str(store), "--backend", "cpu", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ENV,
        start_new_session=True)


def _rows(store: Path, sql: str) -> list[tuple]:
    files = list(store.glob("candidates/**/*.parquet"))
    if not files:
        return []
    con = duckdb.connect()
    try:
        return con.execute(sql.replace("C", f"read_parquet({[str(f) for f in files]!r}, "
                                            "union_by_name=true)")).fetchall()
    finally:
        con.close()


def _wait_rows(store: Path, where: str, n: int, proc: subprocess.Popen, limit: float) -> None:
    deadline = time.time() + limit
    while time.time() < deadline and proc.poll() is None:
        if (_rows(store, f"select count(*) from C where {where}") or [(0,)])[0][0] >= n:
            return
        time.sleep(0.3)
    out = proc.stdout.read() if proc.poll() is not None else ""
    raise AssertionError(f"no {n} rows where {where} within {limit} s: {out[-3000:]}")


def test_cluster_spreads_classes_and_survives_a_dead_node(cluster, tmp_path):
    yaml, store = _yaml(tmp_path, cluster.port), tmp_path / "store"
    a1 = cluster.node_id("a1")
    proc = _sweep(tmp_path, yaml, store)
    _wait_rows(store, f"node_id = '{a1}'", 1, proc, 240)  # a1 is doing work: kill it
    cluster.kill("a1")
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-3000:]
    assert "fault:" in out  # the driver said what happened
    rows = _rows(store, "select device_class, candidate_id, status, node_id from C")
    n = 24  # 8 x 3 launch configs, one problem size
    assert len(rows) == 2 * n
    assert {(dc, c) for dc, c, _, _ in rows} == {(dc, c) for dc in "ab" for c, in
                                                 _rows(store, "select distinct candidate_id "
                                                       "from C")}
    assert all(st == "ok" for _, _, st, _ in rows), [r for r in rows if r[2] != "ok"]
    a_nodes = {nid for dc, _, _, nid in rows if dc == "a"}
    b_nodes = {nid for dc, _, _, nid in rows if dc == "b"}
    assert a1 in a_nodes and len(a_nodes) == 2 and len(b_nodes) == 1 and a1 not in b_nodes
    best = subprocess.run([sys.executable, "-m", "kopt.cli", "best", "--store", str(store),
                           "--format", "json", "cluster"], capture_output=True, text=True,
                          env=ENV, timeout=120)
    assert best.returncode == 0, best.stderr
    winners = json.loads(best.stdout)
    assert sorted(w["device_class"] for w in winners) == ["a", "b"]


def test_cluster_driver_killed_then_resumed(cluster, tmp_path):
    yaml, store = _yaml(tmp_path, cluster.port), tmp_path / "store"
    proc = _sweep(tmp_path, yaml, store)
    _wait_rows(store, "status = 'ok'", 6, proc, 240)
    os.killpg(proc.pid, signal.SIGKILL)  # the driver and everything it started locally
    proc.wait(timeout=60)
    before = dict(_rows(store, "select job_key, median_ms from C"))
    assert 6 <= len(before) < 48
    run_id = _rows(store, "select distinct run_id from C")[0][0]
    proc = _sweep(tmp_path, yaml, store, "--resume", run_id)
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-3000:]
    rows = _rows(store, "select job_key, median_ms, status from C")
    assert len(rows) == 48 and len({k for k, _, _ in rows}) == 48  # no duplicates
    assert all(st == "ok" for _, _, st in rows)
    after = {k: m for k, m, _ in rows}
    assert all(after[k] == v for k, v in before.items())  # nothing measured twice

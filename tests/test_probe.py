"""A HOST:PORT that is not a Ray head is refused in seconds (kopt.run.probe), not after Ray's
own 90 s and more of retries."""

import socket
import threading
import time

import pytest
from click.testing import CliRunner

from conftest import ROOT
from kopt.cli.main import main
from kopt.run.probe import speaks_http2


def _server(reply: bytes | None) -> tuple[socket.socket, int]:
    """A TCP server on a free port that answers each connection with ``reply`` (None:
    accepts and stays silent; b"": closes at once)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    threading.Thread(target=_serve, args=(srv, reply), daemon=True).start()
    return srv, srv.getsockname()[1]


def _serve(srv: socket.socket, reply: bytes | None) -> None:
    held = []
    while True:
        try:
            c, _ = srv.accept()
        except OSError:
            return
        if reply is None:
            held.append(c)
            continue
        if reply:
            c.sendall(reply)
        c.close()


@pytest.mark.parametrize("reply", [None, b"", b"SSH-2.0-OpenSSH_9.6\r\n",
                                   b"HTTP/1.1 400 Bad Request\r\n\r\n"],
                         ids=["silent", "closes", "ssh", "http1"])
def test_a_server_that_is_not_http2_is_no_ray_head(reply):
    srv, port = _server(reply)
    try:
        t0 = time.monotonic()
        assert speaks_http2("127.0.0.1", port, timeout_s=1.0) is False
        assert time.monotonic() - t0 < 5
    finally:
        srv.close()


def test_a_ray_heads_gcs_speaks_http2(ray_local):
    host, port = ray_local.get_runtime_context().gcs_address.rsplit(":", 1)
    assert speaks_http2(host, int(port)) is True


def test_sweep_with_an_address_that_is_not_ray_is_one_line_in_seconds(tmp_path):
    """It waited 90 s and more in ray.init (then an interrupt, or Ray's own lines)."""
    srv, port = _server(None)
    try:
        t0 = time.monotonic()
        r = CliRunner().invoke(main, ["sweep", str(ROOT / "sweeps" / "vector_add"), "--backend",
                                      "cpu", "--address", f"127.0.0.1:{port}", "--store",
                                      str(tmp_path / "st")])
        took = time.monotonic() - t0
    finally:
        srv.close()
    assert r.exit_code == 2, r.output
    assert r.output == (f"error: --address 127.0.0.1:{port}: what answers at 127.0.0.1:{port} "
                        "is not a Ray head (no gRPC there); give the head's GCS address "
                        "(`ray status` on the head shows it; port 6379 by default)\n"), r.output
    assert took < 30


def test_head_problem_names_what_is_wrong_with_an_address():
    import socket

    from kopt.run.probe import head_problem

    assert head_problem("nohost") == "format" and head_problem("h:port") == "format"
    assert head_problem("::1:6379") == "format"  # IPv6 needs brackets Ray does not take
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    assert head_problem(f"127.0.0.1:{free}", connect_timeout_s=2) == "silent"
    with socket.socket() as srv:  # accepts, then says nothing: not HTTP/2
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        port = srv.getsockname()[1]
        assert head_problem(f"127.0.0.1:{port}", connect_timeout_s=2) == "not_ray"

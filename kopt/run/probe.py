"""Whether a HOST:PORT is a Ray head before Ray's own connect is tried.

Given the address of a server that is not Ray (a web server, ssh, a port that accepts and
says nothing), ``ray.init`` waited 90 s and more, retrying, then failed with its own lines.
A Ray head's GCS is a gRPC server, which speaks HTTP/2: :func:`speaks_http2` sends the
client connection preface and reads the server's first frame, a SETTINGS frame for any
HTTP/2 server (RFC 9113, section 3.4), within a few seconds.
"""

from __future__ import annotations

import os
import socket

# RFC 9113 3.4: the client connection preface, then an empty SETTINGS frame (6.5): length
# 0 (3 bytes), type 0x4, flags 0, stream 0
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
SETTINGS_TYPE = 0x4
PROBE_TIMEOUT_S = 3.0


def speaks_http2(host: str, port: int, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """Whether the server at ``host``:``port`` answers the HTTP/2 preface with a SETTINGS
    frame, as a Ray head's GCS does; False for a banner, an HTTP/1 reply, a closed
    connection or silence for ``timeout_s`` seconds. True without asking under
    ``RAY_USE_TLS`` (the preface would meet TLS). Never raises."""
    if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
        return True
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as s:
            s.sendall(PREFACE)
            head = b""
            while len(head) < 9:  # a frame header: length (3), type, flags, stream (4)
                chunk = s.recv(9 - len(head))
                if not chunk:
                    return False
                head += chunk
    except OSError:  # refused, reset, or silent past timeout_s
        return False
    return head[3] == SETTINGS_TYPE


NOT_RAY = ("what answers at {address} is not a Ray head (no gRPC there); give the head's GCS "
           "address (`ray status` on the head shows it; port 6379 by default)")


def head_problem(address: str, connect_timeout_s: float = 5.0) -> str:
    """What stands in the way of attaching to a Ray head at ``address``, checked in seconds
    before ``ray.init`` is tried: ``"format"`` (not ``HOST:PORT``), ``"silent"`` (nothing
    accepts a TCP connection there within ``connect_timeout_s`` s), ``"not_ray"`` (it does
    not answer HTTP/2, :func:`speaks_http2`: :data:`NOT_RAY` words it), or ``""``. Never
    raises."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or ":" in host:
        return "format"
    try:
        socket.create_connection((host, int(port)), timeout=connect_timeout_s).close()
    except (OSError, OverflowError):
        return "silent"
    return "" if speaks_http2(host, int(port)) else "not_ray"

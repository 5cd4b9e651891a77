"""gpuclust.prometheus: the name lookup is under the request's deadline too.

A dead resolver cannot be made here without changing the machine's resolv.conf, so getaddrinfo is replaced by one
that blocks (what a resolver that never answers looks like to the caller); the rest (sockets, urllib) is real.
"""

from __future__ import annotations

import http.server
import socket
import threading
import time

import pytest

from gpuclust.prometheus import PrometheusClient, QueryFailed
from tests.unit.local_http import serve


def test_a_resolver_that_never_answers_is_cut_off_at_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()

    def hanging(*_args: object, **_kwargs: object) -> object:
        release.wait(60)
        raise socket.gaierror("released")

    monkeypatch.setattr(socket, "getaddrinfo", hanging)
    client = PrometheusClient("http://prometheus.invalid:9090", timeout_s=1.0)
    began = time.monotonic()
    try:
        with pytest.raises(QueryFailed, match=r"timed out after 1 s"):
            client.call("/api/v1/query", {"query": "time()"})
        assert time.monotonic() - began < 10
        assert client.dead is not None and "prometheus.invalid" in client.dead
    finally:
        release.set()


class _Answer(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = b'{"status":"success","data":{"resultType":"scalar","result":[1,"1"]}}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: object) -> None:
        pass


def test_a_name_that_resolves_still_connects() -> None:
    with serve(_Answer) as url:
        port = url.rsplit(":", 1)[1]
        doc = PrometheusClient(f"http://localhost:{port}", timeout_s=10.0).call("/api/v1/query", {"query": "1"})
    assert doc["data"]["result"] == [1, "1"]

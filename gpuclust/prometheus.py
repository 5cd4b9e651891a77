"""A Prometheus HTTP API client with a hard deadline per request (stdlib only).

Shared by the accounting plane's telemetry reader and the guard. Every request is one POST whose whole life,
from connect through the last byte and the JSON parse, ends by `timeout_s`: a server that trickles bytes is
cut off. An answer over `max_bytes`, JSON nested past the parser's limit, bare NaN/Infinity tokens or a
non-success status are a failed query (QueryFailed). After a connection failure or a timeout the client is
dead: later calls raise at once (skipped=True) instead of each waiting for its own timeout. Text from the
server is escaped with terminal_safe before it reaches a message.
"""

from __future__ import annotations

import functools
import http.client
import io
import json
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, NoReturn

from gpuclust.output import terminal_safe

MIB = 1 << 20
DEFAULT_MAX_RESPONSE_BYTES = 256 * MIB
_READ_CHUNK = 1 << 20

__all__ = ["DEFAULT_MAX_RESPONSE_BYTES", "MIB", "PrometheusClient", "QueryFailed"]


class QueryFailed(Exception):
    def __init__(self, message: str, skipped: bool = False) -> None:
        super().__init__(message)
        self.skipped = skipped  # not asked: an earlier query found the server unreachable


class _Deadline:
    """One request's deadline, shared by the socket wrapper below: every send and every receive waits at most
    until it, so a server that trickles bytes cannot stretch a request past `timeout` (connect, headers,
    chunked framing and body alike)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.at = time.monotonic() + seconds

    def left(self) -> float:
        left = self.at - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"timed out after {self.seconds:g} s")
        return left


class _DeadlineRaw(io.RawIOBase):
    def __init__(self, owner: _DeadlineSocket) -> None:
        super().__init__()
        self._owner = owner

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        return self._owner.recv_into(buffer)

    def close(self) -> None:
        if not self.closed:
            super().close()
            self._owner.reader_closed()


class _DeadlineSocket:
    """A connected socket (plain or TLS) whose receives and sends each wait only for the time left before the
    deadline. http.client reads a response through `makefile`; urllib closes the connection's socket while
    the response is still read, so the real socket closes when both are done (as socket.makefile does)."""

    def __init__(self, sock: socket.socket, deadline: _Deadline) -> None:
        self._sock = sock
        self._deadline = deadline
        self._readers = 0
        self._closed = False

    def recv_into(self, buffer: Any) -> int:
        self._sock.settimeout(self._deadline.left())
        return self._sock.recv_into(buffer)

    def sendall(self, data: Any, *args: Any) -> None:
        self._sock.settimeout(self._deadline.left())  # (sendall's timeout bounds the whole send)
        self._sock.sendall(data, *args)

    def makefile(self, mode: str = "rb", *args: Any, **kwargs: Any) -> io.BufferedReader:
        self._readers += 1
        return io.BufferedReader(_DeadlineRaw(self))

    def reader_closed(self) -> None:
        self._readers -= 1
        if self._closed and self._readers <= 0:
            self._sock.close()

    def close(self) -> None:
        self._closed = True
        if self._readers <= 0:
            self._sock.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


def _connect_by(deadline: _Deadline) -> Any:
    """socket.create_connection, with the name lookup under the deadline too: getaddrinfo takes no timeout (a
    dead resolver waits for its own, often 5 s x attempts x servers), so it runs on a daemon thread that the
    request stops waiting for at the deadline."""
    def create_connection(address: tuple[str, int], timeout: Any = None, source_address: Any = None) -> socket.socket:
        host, port = address
        found: dict[str, Any] = {}

        def lookup() -> None:
            try:
                found["addresses"] = socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)
            except OSError as exc:
                found["error"] = exc

        worker = threading.Thread(target=lookup, name="gpuclust-dns", daemon=True)
        worker.start()
        worker.join(deadline.left())
        if worker.is_alive():
            raise TimeoutError(f"timed out after {deadline.seconds:g} s (looking up {host})")
        if "error" in found:
            raise found["error"]
        last: OSError | None = None
        for family, kind, proto, _name, where in found["addresses"]:
            sock = socket.socket(family, kind, proto)
            try:
                sock.settimeout(deadline.left())
                if source_address:
                    sock.bind(source_address)
                sock.connect(where)
                return sock
            except OSError as exc:
                sock.close()
                last = exc
        raise last or OSError(f"no address for {host}")

    return create_connection


class _DeadlineHTTP(http.client.HTTPConnection):
    def __init__(self, *args: Any, deadline: _Deadline, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline = deadline
        self._create_connection = _connect_by(deadline)

    def connect(self) -> None:
        self.timeout = self._deadline.left()  # (create_connection's, and a TLS handshake's, per operation)
        super().connect()
        self.sock = _DeadlineSocket(self.sock, self._deadline)


class _DeadlineHTTPS(http.client.HTTPSConnection):
    def __init__(self, *args: Any, deadline: _Deadline, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline = deadline
        self._create_connection = _connect_by(deadline)

    def connect(self) -> None:
        self.timeout = self._deadline.left()
        super().connect()
        self.sock = _DeadlineSocket(self.sock, self._deadline)


class _HTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, deadline: _Deadline) -> None:
        super().__init__()
        self._deadline = deadline

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(functools.partial(_DeadlineHTTP, deadline=self._deadline), req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, deadline: _Deadline) -> None:
        super().__init__()
        self._deadline = deadline

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(functools.partial(_DeadlineHTTPS, deadline=self._deadline), req,
                            context=self._context)  # type: ignore[attr-defined]


class PrometheusClient:
    def __init__(self, url: str, timeout_s: float, max_bytes: int = DEFAULT_MAX_RESPONSE_BYTES) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes
        self.queries = 0
        self.dead: str | None = None  # why the remaining queries are skipped
        self.skipped = 0

    def call(self, path: str, params: dict[str, str]) -> Any:
        """The `data` of a successful API answer; raises QueryFailed saying why not. The whole request, from
        connect through the last byte and the JSON parse, ends by `timeout_s` (_Deadline)."""
        if self.dead is not None:
            self.skipped += 1
            raise QueryFailed(f"skipped ({self.dead})", skipped=True)
        self.queries += 1
        body = urllib.parse.urlencode(params).encode()
        request = urllib.request.Request(
            self.url + path, data=body, method="POST",
            headers={"Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json"},
        )
        deadline = _Deadline(self.timeout_s)
        timed_out = f"timed out after {self.timeout_s:g} s (the whole request)"
        # (build_opener keeps urllib's proxy and redirect handling; only the connection classes change)
        opener = urllib.request.build_opener(_HTTPHandler(deadline), _HTTPSHandler(deadline))
        try:
            with opener.open(request, timeout=self.timeout_s) as response:
                raw = self._read(response)
        except urllib.error.HTTPError as exc:
            detail = _error_detail(exc)
            raise QueryFailed(f"HTTP {exc.code} {terminal_safe(str(exc.reason))}{detail}") from None
        except urllib.error.URLError as exc:
            reason = exc.reason
            why = timed_out if isinstance(reason, TimeoutError) else f"unreachable ({terminal_safe(str(reason))})"
            self._die(why)
        except TimeoutError:
            self._die(timed_out)
        except (http.client.HTTPException, OSError) as exc:
            self._die(f"connection failed ({type(exc).__name__}: {terminal_safe(str(exc))})")
        try:
            doc = json.loads(raw, parse_constant=_no_constant)
        except RecursionError:
            raise QueryFailed("bad JSON (nested deeper than the parser's limit)") from None
        except (ValueError, MemoryError) as exc:
            raise QueryFailed(f"bad JSON ({terminal_safe(str(exc))[:200]})") from None
        finally:
            del raw
        if time.monotonic() > deadline.at:  # the parse counts too
            self._die(timed_out)
        if not isinstance(doc, dict):
            raise QueryFailed("malformed answer (not a JSON object)")
        if doc.get("status") != "success":
            raise QueryFailed(f"Prometheus error {terminal_safe(str(doc.get('errorType', '?')))[:200]}: "
                               f"{terminal_safe(str(doc.get('error', '?')))[:500]}")
        if not isinstance(doc.get("data"), dict):
            raise QueryFailed("malformed answer (no data)")
        return doc

    def _die(self, why: str) -> NoReturn:
        self.dead = f"{self.url} {why}"
        raise QueryFailed(why)

    def _read(self, response: Any) -> bytes:
        """The body, at most max_bytes (each read waits only for the deadline's time left)."""
        too_big = (f"answer larger than {self.max_bytes / MIB:g} MiB ([telemetry] max_response_mib): query a "
                   "shorter chunk_hours or raise the limit")
        length = response.headers.get("Content-Length", "")
        if length.strip().isdigit() and int(length) > self.max_bytes:
            raise QueryFailed(too_big)
        parts: list[bytes] = []
        total = 0
        while True:
            part = response.read(_READ_CHUNK)
            if not part:
                return b"".join(parts)
            total += len(part)
            if total > self.max_bytes:
                raise QueryFailed(too_big)
            parts.append(part)


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"bare {name} is not JSON")


def _error_detail(exc: urllib.error.HTTPError) -> str:
    """Prometheus's own error text from an HTTP error's JSON body (400/422/503 carry one), if any."""
    try:
        doc = json.loads(exc.read(64 * 1024), parse_constant=_no_constant)
        return f": {terminal_safe(str(doc['errorType']))[:200]}: {terminal_safe(str(doc['error']))[:500]}"
    except Exception:  # any body that is not Prometheus's error JSON: the status line says enough
        return ""

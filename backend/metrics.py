"""The backend's Prometheus `/metrics`, served on an internal address of its own
(`PROOFPOOL_METRICS_ADDRESS`, default 127.0.0.1:9107) instead of the public API.

The counters say how many nodes are in which state and how uploads fare: operators scrape
them, the internet need not read them, and a scrape should not share the public port's
exposure, proxies and limits. The server is a small threaded WSGI server (the standard
library's, with prometheus_client's WSGI app) started and stopped by the app's lifespan.
Every uvicorn worker process runs one, bound with SO_REUSEPORT, so `--workers N` starts
cleanly and a scrape reads whichever process the kernel hands it to.

With several worker processes each would count only its own requests, and successive scrapes
would jump between their counters (68, 17, 68, ...), as if the counters reset. So `backend serve
--workers N` (N > 1) runs them in prometheus_client's multiprocess mode (`multiprocess_dir`): a
fresh directory in PROMETHEUS_MULTIPROC_DIR, set before uvicorn starts the processes, where each
process writes its counters to files of its own; every process's server answers with the sum
over all the files (`metrics_registry`), so any scrape shows the whole backend's totals. The
files of a process that died stay and keep counting in the sum; the directory is removed when
`serve` exits.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import REGISTRY, CollectorRegistry, make_wsgi_app, multiprocess
from prometheus_client.exposition import ThreadingWSGIServer

from proofpool.core.errors import ConfigError

log = logging.getLogger(__name__)

METRICS_PATH = "/metrics"
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
"""prometheus_client reads it when the first metric is made: set, counters live in files there."""


@contextmanager
def multiprocess_dir() -> Iterator[Path]:
    """A fresh, empty PROMETHEUS_MULTIPROC_DIR for the API processes started inside the block
    (they inherit the environment), removed with their counter files afterwards.

    Fresh, because the files of an earlier run (or another backend) would be summed in: a
    directory the operator's environment names is replaced for the block, not reused.
    """
    directory = Path(tempfile.mkdtemp(prefix="proofpool-metrics-"))
    previous = os.environ.get(MULTIPROC_ENV)
    os.environ[MULTIPROC_ENV] = str(directory)
    try:
        yield directory
    finally:
        if previous is None:
            os.environ.pop(MULTIPROC_ENV, None)
        else:
            os.environ[MULTIPROC_ENV] = previous
        shutil.rmtree(directory, ignore_errors=True)


def _multiproc_path() -> str | None:
    """The multiprocess directory this process's metrics live in, None in single-process mode
    (prometheus_client also accepts the lower-case name)."""
    return os.environ.get(MULTIPROC_ENV) or os.environ.get(MULTIPROC_ENV.lower()) or None


def metrics_registry() -> CollectorRegistry:
    """What `/metrics` serves: this process's default registry, or in multiprocess mode the sum
    over every process's counter files."""
    path = _multiproc_path()
    if path is None:
        return REGISTRY
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=path)
    return registry


def mark_process_dead() -> None:
    """On a process's way out in multiprocess mode: drop its live gauges' files (counters stay
    in the sum). The backend has only counters today; this keeps a gauge added later honest."""
    path = _multiproc_path()
    if path is not None:
        multiprocess.mark_process_dead(os.getpid(), path)


class _Server(ThreadingWSGIServer):
    """Threaded WSGI server that shares its port with the other API worker processes."""

    allow_reuse_port = True
    daemon_threads = True


class _Server6(_Server):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    """No line on stderr per scrape."""

    def log_message(self, format: str, *args: Any) -> None:  # same parameter names as the stdlib
        pass


def _only_metrics(app: Callable[..., Iterable[bytes]]) -> Callable[..., Iterable[bytes]]:
    """The WSGI app on `/metrics`, 404 on any other path."""

    def serve(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != METRICS_PATH:
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"only /metrics is served here\n"]
        return app(environ, start_response)

    return serve


class MetricsServer:
    """`/metrics` of `metrics_registry()` on (host, port), in a thread."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.requested_port = host, port
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Bind and serve; `ConfigError` naming the address and the setting if it cannot bind."""
        server_class = _Server6 if ":" in self.host else _Server
        try:
            self._server = make_server(
                self.host,
                self.requested_port,
                _only_metrics(make_wsgi_app(metrics_registry())),
                server_class=server_class,
                handler_class=_QuietHandler,
            )
        except OSError as exc:
            raise ConfigError(
                f"cannot serve metrics on {self.host}:{self.requested_port} ({exc.strerror or exc}): set "
                "PROOFPOOL_METRICS_ADDRESS to a free HOST:PORT on an internal interface, or to '' for none"
            ) from exc
        self._thread = threading.Thread(target=self._server.serve_forever, name="metrics-server", daemon=True)
        self._thread.start()
        log.info("metrics on %s", self.url)

    @property
    def port(self) -> int:
        """The bound port (the requested one, or the one the OS picked for port 0)."""
        if self._server is None:
            raise RuntimeError("the metrics server is not started")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}{METRICS_PATH}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

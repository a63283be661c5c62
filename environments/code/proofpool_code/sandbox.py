"""Run an untrusted Python program inside bubblewrap under prlimit, and say what happened.

This is the only place completions are executed; nothing falls back to `exec` or a plain
subprocess. The layers, outside in:

- the whole sandbox (bwrap included) runs as the unprivileged uid/gid 65534 on the host when we
  are root. That matters for `RLIMIT_NPROC`: the kernel never enforces it for processes of the
  host's uid 0, and a user namespace made by root maps the sandbox's uid to host uid 0, so a fork
  bomb would not be contained. As 65534, process counts are kept per (user namespace, uid), so
  each sandbox has its own budget and cannot starve another;
- bwrap gives fresh user, pid, network, ipc, uts and cgroup namespaces (no network: the new net
  namespace has only a loopback no one listens on), a read-only root holding just the system
  directories the interpreter needs, a fresh size-capped tmpfs as working directory, a new
  procfs and a minimal /dev, a cleared environment, a new session (no terminal injection), no
  nested user namespaces, and it dies with its parent. The program is its pid namespace's init,
  so whatever it forks dies when it ends;
- prlimit caps CPU seconds, address space, file size, processes and open files;
- we start it in its own process group, kill that group on the wall-clock deadline or on any
  error, and read at most a bounded amount of its output.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import selectors
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Final, Literal

Outcome = Literal["passed", "failed", "timeout", "memory", "error"]

SANDBOX_UID: Final = 65534
"""`nobody`: the host uid the sandbox runs as (when we are root) and its uid inside."""

WORKDIR: Final = "/sandbox"
PROGRAM_PATH: Final = "/run/program.py"

INSTALL_HINT: Final = "install bubblewrap and prlimit: apt-get install bubblewrap util-linux"

_DRAIN_LIMIT: Final = 8 << 20
"""Bytes read from one stream before we close it: past this the program only burns our CPU."""
_TAIL_BYTES: Final = 4096
"""The end of a long output is kept too: it holds the last traceback and the pass marker."""


class SandboxUnavailable(RuntimeError):
    """bwrap or prlimit is missing or does not work on this machine: code tasks cannot be scored."""


class SandboxError(RuntimeError):
    """The sandbox failed to start a program (not the program's fault)."""


@dataclass(frozen=True)
class Limits:
    """What one program may use. The first three come from the environment's config."""

    cpu_seconds: int = 5
    memory_mb: int = 512
    """Address space (RLIMIT_AS) per process."""
    wall_seconds: float = 10.0
    nproc: int = 16
    """Processes and threads of the sandbox's uid in its own user namespace (bwrap's init counts)."""
    nofile: int = 64
    fsize_mb: int = 16
    """Largest file the program may write."""
    tmpfs_mb: int = 64
    """Size of the writable working directory (it lives in memory)."""
    output_kb: int = 64
    """Output kept from the start of each stream (the last 4 KB are kept as well)."""


@dataclass(frozen=True)
class RunResult:
    """What a sandboxed run did."""

    outcome: Outcome
    """`passed`: exit 0 and the pass marker printed; `failed`: it ran and did not pass;
    `timeout`: the CPU or wall limit was hit; `memory`: the memory limit was hit; `error`: it was
    killed by another signal or limit."""
    exit_code: int | None
    """bwrap's exit status: the program's, or 128 + signal; None when we killed bwrap."""
    signal: int | None
    """The signal that ended the program, when there was one (from 128 + n, or ours)."""
    timed_out: bool
    """We killed it at the wall-clock deadline."""
    cpu_seconds: float | None
    """User + system CPU of the whole sandbox (bwrap and every reaped process in it)."""
    wall_seconds: float
    stdout: str
    stderr: str
    truncated: bool
    """Some output was dropped (stdout or stderr was longer than the cap)."""
    detail: str
    """One line for a person."""


@dataclass(frozen=True)
class SandboxInfo:
    """What `check_sandbox` found: the versions that can change a score."""

    bwrap_version: str
    python: str
    """The interpreter run inside (a path on the host, bound read-only at the same path)."""
    python_version: str


class _Capture:
    """The head and tail of one output stream, with a count of what was read."""

    def __init__(self, head_bytes: int) -> None:
        self.head_bytes = head_bytes
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_bytes - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            del self.tail[:-_TAIL_BYTES]

    @property
    def truncated(self) -> bool:
        return self.total > len(self.head) + len(self.tail)

    def text(self) -> str:
        head = self.head.decode("utf-8", "replace")
        tail = self.tail.decode("utf-8", "replace")
        if self.truncated:
            skipped = self.total - len(self.head) - len(self.tail)
            return f"{head}\n[... {skipped} bytes dropped ...]\n{tail}"
        return head + tail


class _Status:
    """bwrap's `--json-status-fd` reports: one JSON object a line, the first naming the program's
    pid (on the host) once the sandbox is set up. We hold a pidfd on it, to kill exactly it."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.started = False
        self.child_pid: int | None = None
        self.child_fd: int | None = None

    def feed(self, data: bytes) -> None:
        self.buffer += data
        while b"\n" in self.buffer:
            line, _, rest = bytes(self.buffer).partition(b"\n")
            self.buffer = bytearray(rest)
            with contextlib.suppress(ValueError):
                report = json.loads(line)
                if isinstance(report, dict) and isinstance(report.get("child-pid"), int):
                    self.started = True
                    self.child_pid = report["child-pid"]
                    with contextlib.suppress(OSError):
                        self.child_fd = os.pidfd_open(self.child_pid)

    def namespace_cpu(self) -> float:
        """CPU seconds of every process now in the program's pid namespace, read from /proc.

        Taken just before a wall-clock kill: what wait4 reports then misses the children the
        program never reaped (a fork bomb's), which would make a CPU burner look like a run
        starved by an overloaded machine."""
        if self.child_pid is None:
            return 0.0
        try:
            namespace = os.readlink(f"/proc/{self.child_pid}/ns/pid")
        except OSError:
            return 0.0
        ticks = 0
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                if os.readlink(f"{entry.path}/ns/pid") != namespace:
                    continue
                with open(f"{entry.path}/stat", "rb") as stat:
                    fields = stat.read().rpartition(b")")[2].split()
            except OSError:
                continue
            # After the command's closing parenthesis: state is field 0, then utime, stime and
            # the reaped children's cutime, cstime are 11..14.
            ticks += sum(int(field) for field in fields[11:15])
        return ticks / os.sysconf("SC_CLK_TCK")

    def kill_child(self) -> None:
        if self.child_fd is not None:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self.child_fd, signal.SIGKILL)

    def close(self) -> None:
        if self.child_fd is not None:
            os.close(self.child_fd)
            self.child_fd = None


def _system_binds() -> list[str]:
    """Read-only binds of the directories an interpreter needs: /usr, and /bin, /lib* as they are
    on the host (symlinks into /usr on merged-/usr systems, directories elsewhere). /etc, /home,
    /root, /tmp, /var and the repository are not there at all."""
    args = ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = f"/{name}"
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    return args


def _under(path: str, root: str) -> bool:
    return os.path.commonpath([os.path.abspath(path), root]) == root


def _classify_exit(code: int | None, stderr: str) -> tuple[Outcome, str]:
    lines = [line for line in stderr.splitlines() if line.strip()]
    last = lines[-1].strip() if lines else ""
    if code is not None and code > 128 and code - 128 < signal.NSIG:
        number = code - 128
        with contextlib.suppress(ValueError):
            return "error", f"killed by {signal.Signals(number).name}"
    if re.match(r"(\w+\.)*MemoryError\b", last) or "Cannot allocate memory" in last:
        return "memory", last[:200]
    if not last:
        return "failed", f"exit code {code}"
    # A failed assert: name the assert line from the traceback (the file is in the sandbox).
    if last.startswith("AssertionError"):
        source = [line.strip() for line in lines[-4:-1] if line.strip().strip("^~ ")]
        if source and source[-1].startswith("assert"):
            return "failed", f"{last[:80]}: {source[-1][:160]}"
    return "failed", last[:200]


@dataclass(frozen=True)
class Sandbox:
    """bwrap + prlimit at fixed paths with fixed limits; `run` executes one program.

    Build it with `Sandbox.find` (or `check_sandbox`, which also proves it works).
    """

    bwrap: str
    prlimit: str
    python: str
    """The interpreter run inside (a host path, bound read-only at the same path)."""
    limits: Limits = Limits()

    @classmethod
    def find(
        cls,
        limits: Limits | None = None,
        *,
        bwrap: str = "bwrap",
        prlimit: str = "prlimit",
        python: str = "/usr/bin/python3",
        path: str | None = None,
    ) -> Sandbox:
        """Look `bwrap` and `prlimit` up on `path` (default: $PATH; absolute paths are taken as
        they are), so a test can point them at something missing."""
        found_bwrap = shutil.which(bwrap, path=path)
        found_prlimit = shutil.which(prlimit, path=path)
        if found_bwrap is None:
            raise SandboxUnavailable(f"bubblewrap ({bwrap!r}) was not found on PATH; {INSTALL_HINT}")
        if found_prlimit is None:
            raise SandboxUnavailable(f"prlimit ({prlimit!r}) was not found on PATH; {INSTALL_HINT}")
        return cls(os.path.realpath(found_bwrap), os.path.realpath(found_prlimit), python, limits or Limits())

    def argv(self, program_fd: int, status_fd: int) -> list[str]:
        """The bwrap command line; the program comes in on `program_fd` (copied into the sandbox),
        bwrap reports its start and the exit code on `status_fd`."""
        limits = self.limits
        binds = _system_binds()
        # An interpreter or prlimit outside /usr (a pyenv or conda install) is bound read-only
        # at its own path: its prefix for the interpreter, the file for prlimit.
        python_prefix = os.path.dirname(os.path.dirname(self.python))
        if not _under(self.python, "/usr"):
            binds += ["--ro-bind", python_prefix, python_prefix]
        if not _under(self.prlimit, "/usr"):
            binds += ["--ro-bind", self.prlimit, self.prlimit]
        uid = str(SANDBOX_UID)
        return [
            self.bwrap,
            "--unshare-all",
            "--unshare-user",
            "--disable-userns",
            "--die-with-parent",
            "--new-session",
            # The program is the namespace's init: bwrap then reaps it itself, so its CPU time
            # reaches us through wait4, and every process it leaves behind dies with it.
            "--as-pid-1",
            "--hostname",
            "sandbox",
            *binds,
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--size",
            str(limits.tmpfs_mb << 20),
            "--tmpfs",
            WORKDIR,
            "--ro-bind-data",
            str(program_fd),
            PROGRAM_PATH,
            "--remount-ro",
            "/",
            "--remount-ro",
            "/dev",
            "--uid",
            uid,
            "--gid",
            uid,
            "--clearenv",
            "--setenv",
            "PATH",
            "/usr/bin:/bin",
            "--setenv",
            "HOME",
            WORKDIR,
            "--setenv",
            "LANG",
            "C.UTF-8",
            "--chdir",
            WORKDIR,
            "--json-status-fd",
            str(status_fd),
            "--",
            self.prlimit,
            f"--cpu={limits.cpu_seconds}",
            f"--as={limits.memory_mb << 20}",
            f"--fsize={limits.fsize_mb << 20}",
            f"--nproc={limits.nproc}",
            f"--nofile={limits.nofile}",
            "--core=0",
            "--",
            self.python,
            "-I",  # isolated: no PYTHON* variables, no user site, no script dir on sys.path
            "-B",  # write no .pyc
            PROGRAM_PATH,
        ]

    def run(self, program: str, marker: str | None = None) -> RunResult:
        """Run `program`; it passes when it exits 0 having printed `marker` on a line of its own
        (or just exits 0 when there is no marker). Raises `SandboxError` only when the sandbox
        could not start the program; whatever the program does comes back as a `RunResult`."""
        program_fd = os.memfd_create("program.py", os.MFD_CLOEXEC)
        status_r, status_w = os.pipe()
        proc: subprocess.Popen[bytes] | None = None
        try:
            os.write(program_fd, program.encode("utf-8", "surrogatepass"))
            os.lseek(program_fd, 0, os.SEEK_SET)
            drop = os.geteuid() == 0
            start = time.monotonic()
            try:
                proc = subprocess.Popen(
                    self.argv(program_fd, status_w),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    pass_fds=(program_fd, status_w),
                    cwd="/",
                    env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
                    start_new_session=True,  # its own process group, which we kill as a whole
                    user=SANDBOX_UID if drop else None,
                    group=SANDBOX_UID if drop else None,
                    extra_groups=[] if drop else None,
                )
            except OSError as exc:
                raise SandboxError(f"could not start bwrap: {exc}") from exc
            os.close(status_w)
            status_w = -1
            return self._supervise(proc, status_r, start, marker)
        finally:
            if proc is not None and proc.returncode is None:
                _kill_group(proc)
            for fd in (program_fd, status_r, status_w):
                if fd >= 0:
                    os.close(fd)
            if proc is not None:
                for stream in (proc.stdout, proc.stderr):
                    if stream is not None:
                        stream.close()

    def _supervise(self, proc: subprocess.Popen[bytes], status_fd: int, start: float, marker: str | None) -> RunResult:
        """Read the outputs and bwrap's status until the program ends or the deadline passes."""
        limits = self.limits
        assert proc.stdout is not None and proc.stderr is not None
        head = limits.output_kb << 10
        streams = {proc.stdout.fileno(): proc.stdout, proc.stderr.fileno(): proc.stderr}
        captures = {fd: _Capture(head) for fd in streams}
        status = _Status()
        bwrap_fd = os.pidfd_open(proc.pid)
        selector = selectors.DefaultSelector()
        try:
            for fd in (*captures, status_fd):
                os.set_blocking(fd, False)
                selector.register(fd, selectors.EVENT_READ)
            selector.register(bwrap_fd, selectors.EVENT_READ)
            deadline = start + limits.wall_seconds
            open_fds = {*captures, status_fd}
            exited = timed_out = False
            stop_at = deadline
            while not (exited and not open_fds):
                now = time.monotonic()
                if now >= stop_at:
                    timed_out = not exited
                    break
                for key, _ in selector.select(stop_at - now):
                    fd = key.fd
                    if fd == bwrap_fd:
                        exited = True
                        selector.unregister(bwrap_fd)
                        # Once bwrap is gone, so is its namespace: the pipes close at once.
                        stop_at = min(deadline, time.monotonic() + 1.0)
                        continue
                    try:
                        data = os.read(fd, 65536)
                    except BlockingIOError:
                        continue
                    if fd == status_fd:
                        status.feed(data)
                    else:
                        captures[fd].feed(data)
                    if not data or (fd in captures and captures[fd].total > _DRAIN_LIMIT):
                        selector.unregister(fd)
                        open_fds.discard(fd)
                        if fd in streams:
                            # Past the drain limit the program's writes fail (EPIPE) at once.
                            streams[fd].close()
            namespace_cpu = 0.0
            if timed_out:
                namespace_cpu = status.namespace_cpu()
                # Kill the program first, so that bwrap reaps it and its CPU time reaches us,
                # then bwrap's whole group in case bwrap itself is what hangs.
                status.kill_child()
                select.select([bwrap_fd], [], [], 1.0)
                _signal_group(proc)
            _, wait_status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(wait_status)
            wall = time.monotonic() - start
        finally:
            selector.close()
            os.close(bwrap_fd)
            status.close()
        cpu = max(usage.ru_utime + usage.ru_stime, namespace_cpu)
        out, err = captures.values()
        stdout, stderr = out.text(), err.text()
        if not status.started:
            # bwrap never started the program: its own setup failed (not the program's fault).
            raise SandboxError(f"bwrap could not set up the sandbox: {stderr.strip()[:300] or 'no message'}")
        code: int | None = proc.returncode if proc.returncode >= 0 else None
        sig = -proc.returncode if proc.returncode < 0 else None
        if code is not None and code > 128 and code - 128 < signal.NSIG:
            sig = code - 128
        outcome: Outcome
        if timed_out:
            outcome, detail = "timeout", f"wall-clock limit of {limits.wall_seconds:g} s"
        elif sig in (signal.SIGXCPU, signal.SIGKILL) and cpu >= 0.9 * limits.cpu_seconds:
            outcome, detail = "timeout", f"CPU limit of {limits.cpu_seconds} s"
        elif code == 0 and (marker is None or marker in stdout.splitlines()):
            outcome, detail = "passed", "exit code 0"
        elif code == 0:
            outcome, detail = "failed", "exited before the tests finished"
        else:
            outcome, detail = _classify_exit(code, stderr)
            if outcome == "memory":
                detail = f"memory limit of {limits.memory_mb} MB: {detail}"
        return RunResult(
            outcome=outcome,
            exit_code=code,
            signal=sig,
            timed_out=timed_out,
            cpu_seconds=cpu,
            wall_seconds=wall,
            stdout=stdout,
            stderr=stderr,
            truncated=out.truncated or err.truncated,
            detail=detail,
        )


def _signal_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL bwrap's process group. The program is in another session, but it has PDEATHSIG
    (--die-with-parent) and is its pid namespace's init: everything inside dies with it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill and reap (the error paths)."""
    _signal_group(proc)
    if proc.returncode is None:
        with contextlib.suppress(ChildProcessError):
            _, wait_status, _ = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(wait_status)


def default_pythons() -> tuple[str, ...]:
    """Interpreters to try inside, in order: this one's base installation (the real interpreter,
    not a venv's link), then the system's. The first may be unreadable to the sandbox's uid (a
    pyenv under /root), hence the second."""
    own = os.path.join(sys.base_prefix, "bin", f"python{sys.version_info.major}.{sys.version_info.minor}")
    return tuple(dict.fromkeys(p for p in (own, "/usr/bin/python3") if os.path.isfile(p)))


_PROBE: Final = "import os, sys\nprint(os.getuid(), '%d.%d.%d' % sys.version_info[:3])\n"


def check_sandbox(
    *,
    bwrap: str = "bwrap",
    prlimit: str = "prlimit",
    pythons: Sequence[str] | None = None,
    path: str | None = None,
) -> tuple[Sandbox, SandboxInfo]:
    """Run a trivial program in the sandbox, or raise `SandboxUnavailable` saying what to install.

    A code pool calls this before anything else, so it refuses to start rather than score
    every completion as a failure (or, worse, run them some other way)."""
    sandbox = Sandbox.find(Limits(wall_seconds=30.0), bwrap=bwrap, prlimit=prlimit, path=path)
    try:
        version = subprocess.run(
            [sandbox.bwrap, "--version"], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        raise SandboxUnavailable(f"bubblewrap at {sandbox.bwrap} does not run ({exc}); {INSTALL_HINT}") from exc
    problems: list[str] = []
    for python in pythons if pythons is not None else default_pythons():
        candidate = replace(sandbox, python=python)
        try:
            result = candidate.run(_PROBE)
        except SandboxError as exc:
            problems.append(f"{python}: {exc}")
            continue
        fields = result.stdout.split()
        if result.outcome == "passed" and len(fields) == 2 and fields[0] == str(SANDBOX_UID):
            info = SandboxInfo(bwrap_version=version, python=python, python_version=fields[1])
            return replace(candidate, limits=Limits()), info
        problems.append(f"{python}: {result.outcome} ({result.detail}; {result.stderr.strip()[-200:]})")
    raise SandboxUnavailable(
        "the bubblewrap sandbox does not work here (user namespaces disabled, or no usable Python "
        f"interpreter): {'; '.join(problems) or 'no interpreter found'}; {INSTALL_HINT}"
    )

"""Running a guide's commands as a reader would: one shell session in one working directory.

Each command runs in its own `bash` with the session's environment and `set -a`, so what it
exports or assigns (`export X=...`, `ADDR=$(...)`) is there for the commands after it, as in a
terminal. A command that does not return (a service: `backend serve`, `worker run`, ...) is
started in the background in its own process group, and the session waits until its log shows
it is ready; `close` stops every service with SIGTERM, then SIGKILL. Every command has a
timeout, so a guide that hangs fails instead of hanging the test.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.guides.markdown import Command, normalized, output_pattern

COMMAND_TIMEOUT = 240.0
"""Seconds any one command may take."""


class GuideFailure(AssertionError):
    """A documented command failed, hung, or did not print what the guide shows."""


@dataclass(frozen=True)
class Service:
    """A command that keeps running, recognised by `pattern`, ready when its log matches `ready`."""

    pattern: str
    ready: str
    timeout: float = 180.0
    deferred: bool = False
    """No later command needs it: the session goes on at once, and `until_ready` (after the guide's last
    command) checks that it became ready within `timeout` of its start, so its start overlaps the
    commands after it."""

    def matches(self, text: str) -> bool:
        return re.search(self.pattern, text) is not None


@dataclass
class Started:
    command: Command
    text: str
    process: subprocess.Popen[bytes]
    log: Path
    service: Service
    deadline: float
    """When it must have become ready (monotonic clock)."""
    ready: bool = False


@dataclass
class GuideShell:
    """One reader's terminal: a working directory, an environment, and the services started so far.

    `substitutions` replace a guide's placeholders (`0xPROVIDER`, `https://api.example.org`) with
    the test's values; a value may be a function, called when a command first needs it (the
    address of a key the guide made a moment before)."""

    workdir: Path
    env: dict[str, str]
    services: tuple[Service, ...]
    substitutions: dict[str, str | Callable[[], str]] = field(default_factory=dict)
    transcript: list[str] = field(default_factory=list)
    started: list[Started] = field(default_factory=list)
    outputs: list[tuple[str, str]] = field(default_factory=list)

    def run_all(self, commands: list[Command], before: Callable[[Command], None] | None = None) -> None:
        for command in commands:
            if before is not None:
                started = time.monotonic()
                before(command)
                self._took("(the market before the next command)", started)
            started = time.monotonic()
            self.run(command)
            self._took(command.where, started)

    def until_ready(self) -> None:
        """Wait until every service started is ready: the deferred ones were not waited for."""
        started = time.monotonic()
        for service in self.started:
            self._until_ready(service)
        self._took("(the services started without waiting, until ready)", started)

    def _took(self, what: str, started: float) -> None:
        """Note in the transcript how long `what` took when it took a while: where a slow guide
        run spends its time."""
        seconds = time.monotonic() - started
        if seconds >= 0.5:
            self.transcript.append(f"# {seconds:.1f} s: {what}")

    def run(self, command: Command) -> str:
        """Run one documented command; returns what it printed (a service: its log so far)."""
        text = self.fill(command.text)
        self.transcript.append(f"$ {text}    # {command.where}")
        bare = re.sub(r"\s+#\s.*$", "", text)  # a trailing comment may name options the command lacks
        service = next((s for s in self.services if s.matches(bare)), None)
        if service is not None:
            return self._start(command, text, service)
        output = self.sh(text, command)
        self.outputs.append((text, output))
        self._check_output(command, output)
        return output

    def output_of(self, pattern: str) -> str:
        """What the latest command matching `pattern` printed."""
        for text, output in reversed(self.outputs):
            if re.search(pattern, text):
                return output
        raise KeyError(f"no command matching {pattern!r} has run")

    def fill(self, text: str) -> str:
        """`text` with every placeholder replaced, longest first (so `0xNODE_B` wins over `0xNODE`), in
        one pass: a value put in is never searched again (a signature's hex may hold `8791`, a port
        placeholder)."""
        if not self.substitutions:
            return text
        placeholders = sorted(self.substitutions, key=len, reverse=True)
        pattern = re.compile("|".join(re.escape(p) for p in placeholders))

        def value(match: re.Match[str]) -> str:
            found = self.substitutions[match.group(0)]
            if callable(found):
                found = self.substitutions[match.group(0)] = found()
            return found

        return pattern.sub(value, text)

    def sh(self, text: str, command: Command | None = None, timeout: float = COMMAND_TIMEOUT) -> str:
        """Run `text` in bash with the session's environment; keep what it exported. Raises
        `GuideFailure` with the output if it exits non-zero or times out."""
        env_file = self.workdir / ".guide-env"
        script = f"set -a\n{text}\n__status=$?\nenv -0 > {env_file}\nexit $__status\n"
        where = command.where if command else "test"
        try:
            result = subprocess.run(**self._bash(script), capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise GuideFailure(f"{where}: `{text}` did not finish in {timeout:.0f} s:\n{_tail(exc.output)}") from None
        output = result.stdout.decode(errors="replace") + result.stderr.decode(errors="replace")
        self.transcript.append(output.rstrip())
        if result.returncode != 0:
            raise GuideFailure(f"{where}: `{text}` exited {result.returncode}:\n{output[-4000:]}")
        if env_file.exists():
            self.env = dict(item.split("=", 1) for item in env_file.read_text().split("\0") if "=" in item)
            self.env.pop("__status", None)
            env_file.unlink()
        return output

    def _bash(self, script: str) -> dict[str, Any]:
        """How every command starts: a plain bash in the working directory with the session's
        environment, no stdin (nothing may wait for a prompt), in a process group of its own."""
        return {
            "args": ["bash", "--noprofile", "--norc", "-c", script],
            "cwd": self.workdir,
            "env": self.env,
            "stdin": subprocess.DEVNULL,
            "start_new_session": True,
        }

    def _check_output(self, command: Command, output: str) -> None:
        printed = normalized(output)
        for expected in command.expected:
            if output_pattern(expected).search(printed) is None:
                raise GuideFailure(
                    f"{command.where}: `{command.text}` no longer prints what the guide shows:\n"
                    f"  documented: {expected}\n  printed:\n{output[-3000:]}"
                )

    def _start(self, command: Command, text: str, service: Service) -> str:
        log = self.workdir / "logs" / f"{len(self.started):02d}-{_slug(text)}.log"
        log.parent.mkdir(exist_ok=True)
        with log.open("wb") as sink:
            process = subprocess.Popen(**self._bash(text), stdout=sink, stderr=subprocess.STDOUT)
        started = Started(command, text, process, log, service, time.monotonic() + service.timeout)
        self.started.append(started)
        if service.deferred:
            return log.read_text(errors="replace")
        return self._until_ready(started)

    def _until_ready(self, started: Started) -> str:
        """Wait until the log of `started` shows it is ready (and prints what the guide shows);
        returns the log so far."""
        command, text, service = started.command, started.text, started.service
        while True:
            content = started.log.read_text(errors="replace")
            if started.ready or re.search(service.ready, content):
                if not started.ready:
                    self._check_output(command, content)
                    started.ready = True
                return content
            if started.process.poll() is not None:
                code = started.process.returncode
                raise GuideFailure(f"{command.where}: `{text}` exited {code}:\n{content[-4000:]}")
            if time.monotonic() > started.deadline:
                raise GuideFailure(
                    f"{command.where}: `{text}` not ready after {service.timeout:.0f} s"
                    f" (waiting for /{service.ready}/):\n{content[-4000:]}"
                )
            time.sleep(0.25)

    def service_log(self, pattern: str) -> str:
        """The log of the started service whose command matches `pattern`."""
        for started in self.started:
            if re.search(pattern, started.text):
                return started.log.read_text(errors="replace")
        raise KeyError(pattern)

    def stop(self, pattern: str, timeout: float = 45.0) -> None:
        """Stop the running services whose command matches `pattern` (SIGTERM, as a supervisor would)."""
        for started in self.started:
            if re.search(pattern, started.text) and started.process.poll() is None:
                _stop_group(started.process, timeout)

    def check_services_alive(self) -> None:
        """Fail if a service the guide started has died since."""
        for started in self.started:
            code = started.process.poll()
            if code is not None and code != 0:
                log = started.log.read_text(errors="replace")
                raise GuideFailure(f"{started.command.where}: `{started.text}` died ({code}):\n{log[-4000:]}")

    def close(self) -> None:
        """Stop every service and leave the session's transcript in `transcript.txt` of the working
        directory (pytest keeps the last runs' temporary folders)."""
        begun = time.monotonic()
        running = [s for s in reversed(self.started) if s.process.poll() is None]
        took = _stop_groups([s.process for s in running], 30.0)
        for started, seconds in zip(running, took, strict=True):
            self.transcript.append(f"# {seconds:.1f} s to stop `{started.text}`")
        self._took(f"stopping {len(running)} service(s) side by side", begun)
        (self.workdir / "transcript.txt").write_text("\n".join(self.transcript) + "\n")


def _stop_group(process: subprocess.Popen[bytes], timeout: float) -> None:
    _stop_groups([process], timeout)


def _stop_groups(processes: list[subprocess.Popen[bytes]], timeout: float) -> list[float]:
    """SIGTERM every process group at once, give them `timeout` seconds together, then SIGKILL
    what is left: the services shut down side by side (each may take seconds to finish its work),
    and a service that would hang cannot hold the test longer than `timeout`. Returns the seconds
    each took to exit (`timeout` for one that had to be killed)."""
    begun = time.monotonic()
    for process in processes:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
    exited: dict[int, float] = {}
    deadline = begun + timeout
    while len(exited) < len(processes) and time.monotonic() < deadline:
        for process in processes:
            if process.pid not in exited and process.poll() is not None:
                exited[process.pid] = time.monotonic() - begun
        time.sleep(0.1)
    for process in processes:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # children a service left behind go too
        process.wait(timeout=10)
    return [exited.get(p.pid, timeout) for p in processes]


def _slug(text: str) -> str:
    words = re.findall(r"[a-z]+", text.removeprefix("proofpool "))[:3]
    return "-".join(words) or "service"


def _tail(data: bytes | str | None) -> str:
    if data is None:
        return ""
    text = data.decode(errors="replace") if isinstance(data, bytes) else data
    return text[-3000:]

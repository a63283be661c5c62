"""The scoring worker: a process that imports math-verify once and forks one child per score.

Why a separate process, and why a fork per score:

- math-verify's own timeouts use `signal.alarm`, which works only in a main thread; the market
  scores from Celery threads and servers. Here its timeouts are switched off and the limits are
  the kernel's instead (`RLIMIT_CPU`, `RLIMIT_AS`), set in a child that exists for one score.
- sympy can run for hours or eat all memory on a hostile answer (`9^{9^{9^{9}}}`, a giant
  factorial), and much of that time is spent inside C code that no Python-level timeout can
  interrupt. The kernel kills the child at its CPU limit; the worker survives and reports it.
- Starting Python and importing sympy costs seconds; forking this warmed-up process costs
  milliseconds. Every child starts from the same state (same imports, same caches), so a score
  does not depend on what was scored before it.

Protocol (one JSON object a line, ASCII): the parent sends
`{"gold": ..., "completion": ..., "cpu_seconds": ..., "memory_mib": ..., "wall_seconds": ...}`
and reads `{"status": ..., "detail": ..., "cpu": ...}` (`cpu`: the child's CPU seconds, for
measurement only; it is not part of the score); the worker's first line is `{"ready": true}`. The
worker exits when its stdin closes, i.e. when the parent goes away.

This module runs in the worker only (`python -c ... proofpool_math.worker.main()`); the parent
side is `proofpool_math.scoring`.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import select
import signal
import sys
import time
from typing import Any, BinaryIO, Final

NEAR_LIMIT: Final = 0.5
"""A score that used more than this share of its CPU limit is `inconclusive`: a machine half
as fast would have timed out, so parties could disagree about it."""
DETAIL_CHARS: Final = 80
"""How much of the parsed answer a score's detail quotes."""


class _SwallowedMemoryError(logging.Handler):
    """Notices a MemoryError that math-verify caught and logged instead of raising.

    math-verify catches `Exception` around parsing and comparison and reports failures only as
    debug log records; a MemoryError (the address-space limit) would otherwise turn into a
    plain "incorrect". The record is inspected, never formatted (formatting a huge sympy object
    can itself hang).
    """

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.seen = False

    def emit(self, record: logging.LogRecord) -> None:
        info = record.exc_info
        if info and info[0] is not None and issubclass(info[0], MemoryError):
            self.seen = True


MEMORY_WATCH: Final = _SwallowedMemoryError()


def quiet_logging() -> None:
    """Route math-verify's and latex2sympy's logs to the memory watch only (nothing is printed)."""
    for name in ("math_verify", "latex2sympy2_extended"):
        logger = logging.getLogger(name)
        logger.handlers[:] = [MEMORY_WATCH]
        logger.setLevel(logging.DEBUG)
        logger.propagate = False


def shown(text: str) -> str:
    """A short, one-line, quoted rendering of an extracted answer for a score's detail."""
    cut = text[:DETAIL_CHARS]
    return repr(cut) + ("..." if len(text) > DETAIL_CHARS else "")


def judge(gold: str, completion: str) -> tuple[str, str]:
    """(status, detail) of a completion against the reference answer, with no limits of its own.

    The completion is parsed with math-verify's LaTeX extraction only, `\\boxed{...}` first. Its
    other extractor (`ExprExtractionConfig`) hands plain-text expressions to sympy's
    `parse_expr`, which runs `eval` on generated code; it is left out so untrusted text only ever
    reaches the ANTLR LaTeX grammar of latex2sympy. The gold answer is trusted (shipped data).
    """
    from math_verify import LatexExtractionConfig, parse, verify

    gold_parsed = parse(f"${gold}$", extraction_config=[LatexExtractionConfig()], parsing_timeout=None)
    predicted = parse(
        completion,
        extraction_config=[LatexExtractionConfig(boxed_match_priority=0)],
        fallback_mode="first_match",
        parsing_timeout=None,
    )
    if not predicted:
        return "unparsed", "no answer found (expected \\boxed{...})"
    text = next((item for item in predicted if isinstance(item, str)), "")
    if verify(gold_parsed, predicted, timeout_seconds=None):
        return "correct", f"answer {shown(text)} equals the reference"
    if all(isinstance(item, str) for item in predicted):
        return "unparsed", f"answer {shown(text)} is not parsable LaTeX"
    return "incorrect", f"answer {shown(text)} differs from the reference"


WARM_UP: Final = (
    ("\\frac{3}{4}", "So the answer is $\\boxed{0.75}$."),
    ("(2, -1)", "\\boxed{x = 2, y = -1}"),
    ("2\\sqrt{3}", "\\boxed{\\sqrt{12}}"),
    ("\\frac{-9 + \\sqrt{53}}{2}", "\\boxed{\\frac{-9-\\sqrt{53}}{2}}"),
    ("40", "\\boxed{40\\%}"),
    ("12.5", "The final answer is $12.5$"),
    ("7", "\\boxed{\\text{seven}}"),
    ("7", "no answer here"),
)
"""Scored once before the first fork, so every child finds sympy's and ANTLR's lazy imports done."""


def address_space() -> int:
    """The process's current virtual memory size in bytes (Linux), or 0 if unknown."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[0]) * resource.getpagesize()
    except (OSError, ValueError, IndexError):
        return 0


def child(write_fd: int, gold: str, completion: str, cpu_seconds: int, memory_mib: int) -> None:
    """The forked child: limit itself, judge, write the verdict, and exit without cleanup."""
    out_of_memory = b'{"status": "error", "detail": "out of memory"}'
    payload = b'{"status": "error", "detail": "the checker failed"}'
    try:
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        os.closerange(3, write_fd)  # the worker's protocol pipe among them
        os.closerange(write_fd + 1, 1 << 16)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        # SIGXCPU (default action: terminate) at the soft limit says "CPU limit" unambiguously;
        # the kernel's SIGKILL one second later stops a child stuck where signals do not reach.
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))
        base = address_space() or 2 << 30
        limit = base + (memory_mib << 20)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        status, detail = judge(gold, completion)
        if MEMORY_WATCH.seen:
            status, detail = "error", "out of memory"
        payload = json.dumps({"status": status, "detail": detail}, ensure_ascii=True).encode("ascii")
    except MemoryError:
        payload = out_of_memory
    except BaseException:  # noqa: BLE001 -- nothing may escape a forked child into the worker's loop
        payload = b'{"status": "error", "detail": "the checker failed"}'
    finally:
        try:
            view = memoryview(payload)
            while view:
                view = view[os.write(write_fd, view) :]
        finally:
            os._exit(0)


def run_one(gold: str, completion: str, cpu_seconds: int, memory_mib: int, wall_seconds: float) -> dict[str, Any]:
    """Score one completion in a fresh child and classify how the child ended."""
    read_fd, write_fd = os.pipe()
    try:
        pid = os.fork()
    except OSError:  # out of processes or memory: the machine's fault, not the completion's
        os.close(read_fd)
        os.close(write_fd)
        return {"status": "inconclusive", "detail": "could not start a checker process", "cpu": 0.0}
    if pid == 0:  # pragma: no cover -- runs in the child, which never returns
        os.close(read_fd)
        child(write_fd, gold, completion, cpu_seconds, memory_mib)
    os.close(write_fd)
    deadline = time.monotonic() + wall_seconds
    chunks: list[bytes] = []
    killed = False
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                os.kill(pid, signal.SIGKILL)
                killed = True
                break
            ready, _, _ = select.select([read_fd], [], [], remaining)
            if ready:
                chunk = os.read(read_fd, 1 << 16)
                if not chunk:
                    break
                chunks.append(chunk)
    finally:
        os.close(read_fd)
    _, wait_status, usage = os.wait4(pid, 0)
    cpu = round(usage.ru_utime + usage.ru_stime, 3)
    return {**classify(wait_status, cpu, b"".join(chunks), killed, cpu_seconds, wall_seconds), "cpu": cpu}


def classify(
    wait_status: int, cpu: float, output: bytes, killed: bool, cpu_seconds: int, wall_seconds: float
) -> dict[str, Any]:
    """The verdict from how the child ended. Details never quote measured times: they are part of
    the score, which must read the same on every machine."""
    if killed:
        return {"status": "inconclusive", "detail": f"wall-clock backstop of {wall_seconds:g} s reached (overloaded)"}
    if os.WIFSIGNALED(wait_status):
        sig = os.WTERMSIG(wait_status)
        if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu >= cpu_seconds):
            return {"status": "timeout", "detail": f"CPU limit of {cpu_seconds} s reached"}
        return {"status": "error", "detail": f"the checker died ({signal.Signals(sig).name}), likely out of memory"}
    try:
        verdict = json.loads(output)
        reply = {"status": str(verdict["status"]), "detail": str(verdict["detail"])}
    except (ValueError, KeyError, TypeError):
        return {"status": "error", "detail": "the checker ended without a verdict"}
    if reply["status"] in ("correct", "incorrect", "unparsed") and cpu > NEAR_LIMIT * cpu_seconds:
        return {
            "status": "inconclusive",
            "detail": f"checking used over {NEAR_LIMIT:.0%} of the {cpu_seconds} s CPU limit",
        }
    return reply


def serve(requests: BinaryIO, replies: BinaryIO) -> None:
    """Answer requests line by line until the parent closes the pipe."""
    for line in requests:
        request: dict[str, Any] = json.loads(line)
        reply = run_one(
            str(request["gold"]),
            str(request["completion"]),
            int(request["cpu_seconds"]),
            int(request["memory_mib"]),
            float(request["wall_seconds"]),
        )
        replies.write(json.dumps(reply, ensure_ascii=True).encode("ascii") + b"\n")
        replies.flush()


def main() -> None:
    """The worker's entry: keep the protocol pipe private, warm up, then serve."""
    # Libraries that print (ANTLR warns on stdout about version mismatches) must not corrupt the
    # protocol: the real stdout becomes a private descriptor, fd 1 goes to stderr.
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when the worker ends
    quiet_logging()
    for gold, completion in WARM_UP:
        judge(gold, completion)
    MEMORY_WATCH.seen = False
    replies.write(b'{"ready": true}\n')
    replies.flush()
    serve(sys.stdin.buffer, replies)

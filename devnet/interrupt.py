"""Ctrl-C and SIGTERM for `proofpool devnet run`: an interrupted run always ends interrupted.

Python's default SIGINT handler raises KeyboardInterrupt at whatever bytecode the main thread
runs, and two places make that unreliable for a process supervising a dozen children:

- a KeyboardInterrupt raised inside a finalizer (`__del__`, a generator's `close()` at garbage
  collection, a weakref callback) is printed as "Exception ignored in ..." and dropped: the run
  carries on as if nothing happened, finishes, and exits 0;
- one raised inside cleanup (stopping the children, anvil, SeaweedFS) cuts that cleanup short
  and leaves processes running.

`catch_interrupts()` therefore remembers the signal as well as raising: the devnet's loops call
`check_interrupted()` (a dropped KeyboardInterrupt is raised again at the next turn) and the
block always ends in KeyboardInterrupt (exit 130) once a signal arrived. Sections that must not
be cut short run under `deferred_interrupts()`: a signal there is raised when the section ends.
A second Ctrl-C never interrupts the cleanup that the first one started (each stop has a timeout).
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from types import FrameType

HANDLED = (signal.SIGINT, signal.SIGTERM)


class Interrupts:
    """The SIGINT/SIGTERM handler of a devnet run: records the first signal, raises once."""

    def __init__(self) -> None:
        self.received: int | None = None
        """The first signal received, if any."""
        self._deferring = 0
        self._raised = False

    def __call__(self, signum: int, _frame: FrameType | None) -> None:
        if self.received is not None:
            return  # cleanup is already under way: a second Ctrl-C must not cut it short
        self.received = signum
        if not self._deferring:
            self._raise()

    def check(self) -> None:
        """Raise KeyboardInterrupt if a signal arrived (again, if its first raise was dropped)."""
        if self.received is not None:
            self._raise()

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """A section that a signal must not cut short; the signal is raised when it ends."""
        self._deferring += 1
        try:
            yield
        finally:
            self._deferring -= 1
        if not self._deferring and self.received is not None and not self._raised:
            self._raise()

    def wait(self, poll: float = 0.5) -> int:
        """Block until SIGINT or SIGTERM arrives and return it. The signal is the end this wait
        expected (`devnet run --serve`), not an interruption: it is forgotten, and the run goes on
        to its cleanup and ends as it would have."""
        self._deferring += 1
        try:
            while self.received is None:
                time.sleep(poll)
            signum, self.received = self.received, None
            return signum
        finally:
            self._deferring -= 1

    def _raise(self) -> None:
        self._raised = True
        raise KeyboardInterrupt


@contextmanager
def catch_interrupts() -> Iterator[Interrupts]:
    """Install an `Interrupts` for SIGINT and SIGTERM (SIGTERM behaves like Ctrl-C); the block
    ends in KeyboardInterrupt if either arrived, whatever else it raised or returned."""
    interrupts = Interrupts()
    previous = {signum: signal.signal(signum, interrupts) for signum in HANDLED}
    try:
        yield interrupts
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        if interrupts.received is not None:  # e.g. a child the signal reached died: still "interrupted"
            raise KeyboardInterrupt from exc
        raise
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if interrupts.received is not None:  # raised inside a finalizer and dropped there
        raise KeyboardInterrupt


def _installed() -> Interrupts | None:
    handler = signal.getsignal(signal.SIGINT)
    return handler if isinstance(handler, Interrupts) else None


def deferred_interrupts() -> AbstractContextManager[None]:
    """`Interrupts.deferred()` of the running devnet, or nothing outside one (tests, bench):
    used around starting a child and recording it, and around stopping children."""
    interrupts = _installed()
    return interrupts.deferred() if interrupts is not None else contextlib.nullcontext()


def wait_for_interrupt() -> int:
    """`Interrupts.wait()` of the running devnet: block until Ctrl-C or SIGTERM."""
    interrupts = _installed()
    if interrupts is None:
        raise RuntimeError("wait_for_interrupt needs a running devnet (catch_interrupts)")
    return interrupts.wait()


def check_interrupted() -> None:
    """`Interrupts.check()` of the running devnet, if any: called once per turn of its loops."""
    interrupts = _installed()
    if interrupts is not None:
        interrupts.check()

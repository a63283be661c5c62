"""`proofpool.devnet.interrupt`: a signal always ends the devnet run in KeyboardInterrupt, even where
Python drops the exception its default handler raises, and never cuts a deferred section short."""

from __future__ import annotations

import gc
import os
import signal
import threading

import pytest
from proofpool.devnet.interrupt import catch_interrupts, check_interrupted, deferred_interrupts, wait_for_interrupt


def deliver(signum: int) -> None:
    """Send `signum` to this process; its Python handler runs before the next bytecode."""
    os.kill(os.getpid(), signum)


class RaisesInFinalizer:
    """An object whose finalizer receives the signal: the KeyboardInterrupt it raises is dropped."""

    def __del__(self) -> None:
        deliver(signal.SIGINT)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_raises_keyboard_interrupt(signum: int) -> None:
    with pytest.raises(KeyboardInterrupt), catch_interrupts():
        deliver(signum)
        pytest.fail("the signal did not interrupt")


DROPPED = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
"""The finalizer's KeyboardInterrupt is reported by Python as unraisable: that is the point."""


@DROPPED
def test_an_interrupt_dropped_in_a_finalizer_still_ends_the_block_interrupted() -> None:
    reached_end = False
    with pytest.raises(KeyboardInterrupt), catch_interrupts() as interrupts:
        RaisesInFinalizer()
        gc.collect()  # "Exception ignored in ... __del__": the run would carry on and exit 0
        assert interrupts.received == signal.SIGINT
        reached_end = True
    assert reached_end


@DROPPED
def test_the_loop_check_raises_again_after_a_dropped_interrupt() -> None:
    with pytest.raises(KeyboardInterrupt), catch_interrupts():
        RaisesInFinalizer()
        gc.collect()
        check_interrupted()
        pytest.fail("check_interrupted did not raise")


def test_a_deferred_section_finishes_and_then_raises() -> None:
    finished = False
    with pytest.raises(KeyboardInterrupt), catch_interrupts():
        with deferred_interrupts():
            deliver(signal.SIGINT)
            finished = True
        pytest.fail("the deferred signal was not raised at the end of the section")
    assert finished


def test_a_second_signal_does_not_cut_cleanup_short() -> None:
    cleaned = False
    with pytest.raises(KeyboardInterrupt), catch_interrupts():
        try:
            deliver(signal.SIGINT)
        finally:
            deliver(signal.SIGINT)  # the impatient second Ctrl-C, while the children stop
            cleaned = True
    assert cleaned


def test_an_exception_caused_by_the_interrupt_ends_as_keyboard_interrupt() -> None:
    with pytest.raises(KeyboardInterrupt), catch_interrupts(), deferred_interrupts():
        deliver(signal.SIGTERM)
        raise RuntimeError("a child the signal stopped was found dead")


def test_the_previous_handlers_are_restored() -> None:
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with catch_interrupts():
        pass
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


def _signal_soon(signum: int, after: float = 0.2) -> threading.Timer:
    timer = threading.Timer(after, os.kill, (os.getpid(), signum))
    timer.start()
    return timer


@pytest.mark.timeout(30)
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_waiting_for_the_signal_takes_it_as_the_end_not_an_interruption(signum: int) -> None:
    """`devnet run --serve`: Ctrl-C ends the wait, and the run then ends as it would have."""
    with catch_interrupts():
        _signal_soon(signum)
        assert wait_for_interrupt() == signum
        check_interrupted()  # forgotten: no KeyboardInterrupt
    # and the block did not end in KeyboardInterrupt either


@pytest.mark.timeout(30)
def test_a_signal_after_the_wait_interrupts_as_usual() -> None:
    with pytest.raises(KeyboardInterrupt), catch_interrupts():
        _signal_soon(signal.SIGINT)
        wait_for_interrupt()
        _signal_soon(signal.SIGINT).join()
        check_interrupted()


def test_waiting_outside_a_devnet_run_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="running devnet"):
        wait_for_interrupt()

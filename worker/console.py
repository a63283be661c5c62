"""What a provider watches while `proofpool worker run` works: one line per event, with the
current checkpoint, batches done, tokens/s, and the verdicts the ledger reports so far.

Lines rather than a live panel: they survive being piped into a log file or a supervisor,
and a provider scrolling back sees the history. Verdict counts come from the backend's public
ledger (`/v1/ledger/submissions?node=...`), polled at most every `ledger_every` seconds.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from dataclasses import dataclass, field

from rich.console import Console

from proofpool.core.errors import ProofpoolError
from proofpool.infra.http.ledger_client import LedgerClient

LEDGER_STATUSES = ("pending", "accepted", "rejected", "finalized", "invalid", "forfeited", "expired")


@dataclass
class WorkerStats:
    """Counters since the worker started."""

    batches: int = 0
    samples: int = 0
    tokens: int = 0
    generate_seconds: float = 0.0
    started: float | None = None
    """When the first batch began (engine start-up is not counted)."""
    verdicts: Counter[str] = field(default_factory=Counter)

    @property
    def tokens_per_second(self) -> float:
        """Generated completion tokens per second of wall time since start (end to end)."""
        if self.started is None:
            return 0.0
        elapsed = time.monotonic() - self.started
        return self.tokens / elapsed if elapsed > 0 else 0.0


class WorkerConsole:
    """Renders the worker's progress on a rich console (stdout)."""

    def __init__(self, node: str, backend_url: str, console: Console | None = None, ledger_every: float = 15.0) -> None:
        self.node = node
        self.stats = WorkerStats()
        self._console = console or Console(highlight=False, soft_wrap=True)
        self._backend_url = backend_url.rstrip("/")
        self._ledger_every = ledger_every
        self._ledger_polled = 0.0
        self.version: int | None = None

    def say(self, text: str) -> None:
        self._console.print(f"[dim]{time.strftime('%H:%M:%S')}[/dim] {text}")

    def checkpoint(self, version: int) -> None:
        if version != self.version:
            self.version = version
            self.say(f"[bold]checkpoint {version}[/bold] loaded")

    def batch_done(
        self, pool_id: int, batch: int, samples: int, tokens: int, seconds: float, work_key: bytes, tx: str | None
    ) -> None:
        s = self.stats
        if s.started is None:
            s.started = time.monotonic() - seconds
        s.batches += 1
        s.samples += samples
        s.tokens += tokens
        s.generate_seconds += seconds
        self._poll_ledger()
        verdicts = ", ".join(f"{s.verdicts[k]} {k}" for k in LEDGER_STATUSES if s.verdicts[k]) or "none yet"
        sent = f"tx {tx[:12]}…" if tx else "already on-chain"
        self.say(
            f"pool {pool_id} · v{self.version} · batch {batch}: {samples} samples, {tokens} tokens "
            f"({tokens / seconds if seconds else 0:,.0f} tok/s) · work 0x{work_key.hex()[:10]}… {sent} · "
            f"{s.batches} batches, {s.tokens_per_second:,.0f} tok/s overall · ledger: {verdicts}"
        )

    def _poll_ledger(self) -> None:
        """Refresh the verdict counts; a backend that does not answer just leaves them stale."""
        now = time.monotonic()
        if now - self._ledger_polled < self._ledger_every:
            return
        self._ledger_polled = now
        with contextlib.suppress(ProofpoolError, ValueError, KeyError):
            self.stats.verdicts = ledger_status_counts(self._backend_url, self.node)


def ledger_status_counts(backend_url: str, node: str) -> Counter[str]:
    """How many of the node's submissions the public ledger has in each status."""
    with LedgerClient(backend_url, timeout=5.0) as ledger:
        return Counter(row["status"] for row in ledger.items("submissions", {"node": node}))

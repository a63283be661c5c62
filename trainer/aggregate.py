"""`proofpool trainer run` on a training pool: the DiLoCo aggregator.

Round v trains from checkpoint v. The aggregator watches it (`proofpool.trainer.rounds_view`):
the pool's active members and their accepted files of model version v from the ledger, each
re-checked on-chain (attested, for version v, by the node the ledger names) and fetched from the
store (`proofpool.training.updates.fetch_update`: sha256 = work key, the model's shapes, the
pool's codec, metadata of this pool, node, round and spec). When `round_decision` says so, it
runs `proofpool.training.rounds.outer_round` (average in work-key order, optional clip, outer
Nesterov step on the fp32 weights with the momentum stored in checkpoint v), writes checkpoint
v+1 with its momentum and round record (`write_round_checkpoint`) and publishes it
(`publish_checkpoint`: store, then chain) with the round's figures in its `proofpool-metrics.json`
(contributors, delta norm, mean inner losses), then scores it on the dataset's held-out rows.

Its only state is what the chain and the store hold: the latest published version, checkpoint v
and its momentum. A restarted aggregator, or another machine with the manager key, computes the
same checkpoint v+1 byte for byte from the same files. What it keeps in memory (the spec, the
dataset, the files fetched for the open round) is a cache of that. Published checkpoints are never
pruned: `proofpool ledger verify-round` recomputes version N from version N-1.

Per round it prints one line (round, contributors, delta norm, eval loss, seconds by phase) and
appends one JSON line to `<state dir>/rounds.jsonl` (see `RoundResult.to_json`); a fresh run at
version 0 first appends the base model's eval loss (`round` null, `version` 0).
"""

from __future__ import annotations

import json
import logging
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from proofpool.trainer.rounds_view import (
    Candidate,
    Decision,
    active_members,
    chain_now,
    pool_started_at,
    round_candidates,
    round_decision,
)
from pydantic import BaseModel, ConfigDict, Field

from proofpool.core.diloco.spec import DilocoSpec
from proofpool.core.diloco.update_file import Update
from proofpool.core.errors import ProofpoolError, ServiceUnavailable
from proofpool.infra.chain.client import ChainClient
from proofpool.infra.checkpoint import DEFAULT_SHARD_SIZE, publish_checkpoint, publishable_figures
from proofpool.infra.http.ledger_client import LedgerClient, LedgerRefused
from proofpool.infra.storage import ObjectStore, StorageError
from proofpool.training.dataset import load_dataset
from proofpool.training.inner import eval_loss
from proofpool.training.published import fetch_dataset, is_training_pool, pool_diloco_spec
from proofpool.training.rounds import outer_round, read_weights, round_checkpoint, write_round_checkpoint
from proofpool.training.updates import UpdateUnusable, fetch_update
from proofpool.training.verify_round import RoundRefuted, check_submission

log = logging.getLogger(__name__)

ROUNDS_FILE: Final = "rounds.jsonl"
WAIT_SAY_INTERVAL: Final = 60.0
"""Seconds between two "waiting" lines of one round."""


class AggregatorConfig(BaseModel):
    """How one aggregator serves one training pool."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pool_id: int = Field(ge=1)
    rounds: int | None = Field(None, ge=1)
    """Rounds to close in this invocation; None: until stopped."""
    poll_interval: float = Field(2.0, gt=0)
    """Seconds between two looks at the open round (`trainer run --poll-interval`): a round closes up to
    this long after its last file was accepted, and each look costs the backend two ledger queries."""
    shard_size: int = Field(DEFAULT_SHARD_SIZE, ge=1024)
    state_dir: Path
    """rounds.jsonl, and the scratch copy of each checkpoint before it is published."""
    checkpoint_cache_dir: Path
    """Verified checkpoints (and the pool's dataset, under `datasets/`)."""
    relays: tuple[str, ...] = ()
    """Checkpoint relays to fetch published versions through (S3 is the fallback)."""
    max_file_bytes: int | None = Field(None, ge=1)
    """Largest update file fetched (the backend's upload cap); None: no limit."""
    max_checkpoint_bytes: int | None = Field(None, ge=1)
    """Largest checkpoint fetched (the sum of its manifest's sizes); None: no limit."""
    eval_batch_size: int = Field(16, ge=1)


@dataclass(frozen=True)
class RoundResult:
    """One closed round: checkpoint `version` = `round` + 1, published."""

    round: int
    version: int
    closed: str
    """Why it closed: `all_members` or `deadline` (`proofpool.trainer.rounds_view.round_decision`)."""
    included: tuple[str, ...]
    contributors: tuple[str, ...]
    delta_norm: float
    eval_loss: float | None
    """Mean token loss of checkpoint `version` on the dataset's held-out rows (None: the spec holds none out)."""
    inner_loss: float
    """Mean over the included files of their mean inner loss."""
    inner_loss_last: float
    """Mean over the included files of their last inner step's loss."""
    manifest_sha256: str
    tx_hash: str
    seconds: dict[str, float]
    """wait (round open -> close), fetch (files, summed), aggregate, publish, eval."""

    def to_json(self) -> dict[str, Any]:
        """The rounds.jsonl line."""
        return {
            "round": self.round,
            "version": self.version,
            "closed": self.closed,
            "included": list(self.included),
            "contributors": list(self.contributors),
            "delta_norm": self.delta_norm,
            "eval_loss": self.eval_loss,
            "inner_loss": self.inner_loss,
            "inner_loss_last": self.inner_loss_last,
            "manifest_sha256": self.manifest_sha256,
            "tx_hash": self.tx_hash,
            "seconds": {name: round(value, 3) for name, value in self.seconds.items()},
            "time": time.time(),
        }

    def line(self) -> str:
        loss = "n/a" if self.eval_loss is None else f"{self.eval_loss:.4f}"
        phases = ", ".join(f"{name} {value:.1f}" for name, value in self.seconds.items())
        return (
            f"round {self.round}: {len(self.included)} contributors ({self.closed.replace('_', ' ')}), "
            f"delta norm {self.delta_norm:.4g}, inner loss {self.inner_loss:.4f}, eval loss {loss} -> "
            f"checkpoint {self.version} (tx {self.tx_hash[:14]}…); seconds: {phases}"
        )


@dataclass
class _OpenRound:
    """What the aggregator learnt about the open round so far (rebuilt by a fresh process)."""

    round: int
    opened_at: int
    previous_dir: Path
    previous_manifest: str
    shapes: dict[str, tuple[int, ...]]
    usable: dict[str, tuple[Candidate, Update]] = field(default_factory=dict)
    """Fetched and checked files by work key."""
    refused: set[str] = field(default_factory=set)
    """Work keys that can never be used (chain check or file check failed)."""
    fetch_seconds: float = 0.0
    said_at: float = float("-inf")

    def chosen(self) -> dict[str, tuple[Candidate, Update]]:
        """The usable file of each node: its first submitted, should a node have two (validators
        make a second file of a round `duplicate_batch`, but the ledger may list them in any order)."""
        first: dict[str, tuple[Candidate, Update]] = {}
        for candidate, update in self.usable.values():
            held = first.get(candidate.node)
            if held is None or candidate.position < held[0].position:
                first[candidate.node] = (candidate, update)
        return first


class Aggregator:
    """Closes the rounds of one training pool and publishes their checkpoints (see the module)."""

    def __init__(
        self,
        config: AggregatorConfig,
        client: ChainClient,
        store: ObjectStore,
        ledger: LedgerClient,
        *,
        stop: threading.Event | None = None,
        say: Callable[[str], None] = print,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.config, self.client, self.store, self.ledger = config, client, store, ledger
        self.stop = stop or threading.Event()
        self.say = say
        self.clock = clock or (lambda: chain_now(client))
        self.pool_id = config.pool_id
        self._spec: DilocoSpec | None = None
        self._tokens: Any = None
        self._open: _OpenRound | None = None

    @property
    def spec(self) -> DilocoSpec:
        """The pool's spec, checked against both on-chain commitments (fetched once)."""
        if self._spec is None:
            info = self.client.pool.get_pool(self.pool_id)
            if not is_training_pool(info.model_uri):
                raise ProofpoolError(f"pool {self.pool_id} is not a training pool (model URI {info.model_uri!r})")
            self._spec = pool_diloco_spec(self.store, info.model_uri, info.spec_sha256)
        return self._spec

    @property
    def tokens(self) -> Any:
        """The pool's dataset (int32 [sequences, seq_len]), fetched once and verified."""
        if self._tokens is None:
            path = fetch_dataset(self.store, self.spec, self.config.checkpoint_cache_dir)
            self._tokens = load_dataset(path, self.spec.dataset.sha256)
        return self._tokens

    def run(self) -> int:
        """Close rounds until `config.rounds` are closed or `stop` is set; returns the latest published version."""
        spec = self.spec
        self.say(
            f"aggregator for training pool {self.pool_id}: spec {spec.sha256()[:12]}…, {spec.inner.steps} inner steps, "
            f"outer lr {spec.outer.lr:g} momentum {spec.outer.momentum:g}, round deadline "
            f"{spec.round.deadline_seconds} s with >= {spec.round.min_contributors} files"
        )
        closed = 0
        while not self.stop.is_set():
            try:
                result = self.close_round()
            except (ServiceUnavailable, LedgerRefused) as exc:
                log.warning("ledger unavailable, retrying: %s", exc, extra={"pool": self.pool_id})
                result = None
            if result is not None:
                closed += 1
                if self.config.rounds is not None and closed >= self.config.rounds:
                    break
                continue  # the next round may be closable at once
            self.stop.wait(self.config.poll_interval)
        return self._latest_version()

    def close_round(self) -> RoundResult | None:
        """Look at the open round once: fetch its new accepted files, and if `round_decision` says
        so, take the outer step and publish the next checkpoint. None while the round stays open."""
        current = self._watch()
        candidates = round_candidates(self.ledger, self.pool_id, current.round, current.opened_at)
        for candidate in candidates:
            if candidate.work_key not in current.usable and candidate.work_key not in current.refused:
                self._take(current, candidate)
        members = active_members(self.ledger, self.pool_id)
        chosen = current.chosen()
        now = self.clock()
        decision = round_decision(members, set(chosen), current.opened_at, now, self.spec.round)
        if not decision.close:
            self._say_waiting(current, members, set(chosen), now)
            return None
        return self._close(current, decision, now)

    def _watch(self) -> _OpenRound:
        """The open round: the one after the latest published version (cached until it changes)."""
        latest = self.client.pool.latest_checkpoint(self.pool_id)
        version = latest.version if latest.published_at else 0
        if self._open is not None and self._open.round == version:
            return self._open
        spec = self.spec
        if version == 0:
            opened_at = pool_started_at(self.client, self.pool_id)
            manifest = spec.model.manifest_sha256
            if manifest is None:
                raise ProofpoolError(f"the spec of pool {self.pool_id} names no checkpoint 0 manifest")
        else:
            opened_at, manifest = latest.published_at, latest.manifest_sha256.hex()
        previous_dir = round_checkpoint(
            self.client,
            self.store,
            spec,
            self.pool_id,
            version,
            self.config.checkpoint_cache_dir,
            self.config.relays,
            max_bytes=self.config.max_checkpoint_bytes,
        )
        shapes = {name: tuple(t.shape) for name, t in read_weights(previous_dir).items()}
        self._open = _OpenRound(version, int(opened_at), previous_dir, manifest, shapes)
        if version == 0:
            self._record_base(previous_dir)
        log.info("round open", extra={"pool": self.pool_id, "round": version, "opened_at": opened_at})
        return self._open

    def _take(self, current: _OpenRound, candidate: Candidate) -> None:
        """Check one accepted file against the chain and fetch it: usable, refused for good, or
        (store unreachable) left for the next look."""
        extra = {"pool": self.pool_id, "round": current.round, "work_key": candidate.work_key, "node": candidate.node}
        started = time.monotonic()
        try:
            check_submission(self.client, self.pool_id, candidate.work_key, candidate.node, current.round)
            update = fetch_update(
                self.store,
                self.spec,
                self.pool_id,
                candidate.node,
                candidate.work_key,
                current.round,
                current.shapes,
                max_bytes=self.config.max_file_bytes,
            )
        except (RoundRefuted, UpdateUnusable) as exc:
            current.refused.add(candidate.work_key)
            log.warning("accepted file left out of the round: %s", exc, extra=extra)
            return
        except StorageError as exc:
            log.warning("accepted file not fetched, retrying: %s", exc, extra=extra)
            return
        finally:
            current.fetch_seconds += time.monotonic() - started
        current.usable[candidate.work_key] = (candidate, update)

    def _close(self, current: _OpenRound, decision: Decision, now: float) -> RoundResult:
        spec, round_ = self.spec, current.round
        chosen = sorted(current.chosen().values(), key=lambda pair: pair[0].work_key)
        updates = [(candidate.work_key, update) for candidate, update in chosen]
        started = time.monotonic()
        weights, momentum, record = outer_round(
            current.previous_dir, updates, spec, self.pool_id, round_, current.previous_manifest
        )
        losses = [update.meta.losses for _, update in updates]
        inner_loss = statistics.fmean(statistics.fmean(trace) for trace in losses)
        inner_loss_last = statistics.fmean(trace[-1] for trace in losses)
        figures = {
            "contributors": len(record.included),
            "delta_norm": record.delta_norm,
            "inner_loss": inner_loss,
            "inner_loss_last": inner_loss_last,
        }  # the checkpoint's proofpool-metrics.json; the eval loss comes after publication
        self.config.state_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="proofpool-round-", dir=self.config.state_dir) as tmp:
            out_dir = Path(tmp) / "model"
            write_round_checkpoint(current.previous_dir, weights, momentum, record, out_dir)
            aggregated = time.monotonic()
            published = publish_checkpoint(
                self.client,
                self.store,
                self.pool_id,
                round_ + 1,
                out_dir,
                self.config.shard_size,
                work_dir=Path(tmp),
                figures=publishable_figures(figures),
            )
            publishing_done = time.monotonic()
            loss = self._eval(out_dir)
        result = RoundResult(
            round=round_,
            version=published.version,
            closed=decision.reason,
            included=record.included,
            contributors=record.contributors,
            delta_norm=record.delta_norm,
            eval_loss=loss,
            inner_loss=inner_loss,
            inner_loss_last=inner_loss_last,
            manifest_sha256=published.manifest_sha256.hex(),
            tx_hash="0x" + published.tx_hash.hex(),
            seconds={
                "wait": max(0.0, now - current.opened_at),
                "fetch": current.fetch_seconds,
                "aggregate": aggregated - started,
                "publish": publishing_done - aggregated,
                "eval": time.monotonic() - publishing_done,
            },
        )
        append_round(self.config.state_dir, result.to_json())
        log.info("checkpoint published", extra={"pool": self.pool_id, "version": result.version})
        self.say(result.line())
        self._open = None
        return result

    def _eval(self, model_dir: Path) -> float | None:
        rows = self.spec.eval_rows
        return eval_loss(model_dir, self.tokens, rows, self.config.eval_batch_size) if rows else None

    def _record_base(self, model_dir: Path) -> None:
        """A fresh run's first line: the base model's eval loss (once per state directory)."""
        if any(row.get("version") == 0 for row in read_rounds(self.config.state_dir)):
            return
        started = time.monotonic()
        loss = self._eval(model_dir)
        append_round(
            self.config.state_dir,
            {"round": None, "version": 0, "eval_loss": loss, "seconds": {"eval": round(time.monotonic() - started, 3)}},
        )
        self.say(f"checkpoint 0 (the base model): eval loss {'n/a' if loss is None else f'{loss:.4f}'}")

    def _say_waiting(self, current: _OpenRound, members: frozenset[str], contributors: set[str], now: float) -> None:
        """At most one line a minute (`WAIT_SAY_INTERVAL`) about what the open round waits for."""
        if now - current.said_at < WAIT_SAY_INTERVAL:
            return
        current.said_at = now
        rules = self.spec.round
        left = current.opened_at + rules.deadline_seconds - now
        deadline = f"deadline in {left:.0f} s" if left > 0 else "deadline passed"
        have = sum(1 for node in members if node in contributors)
        self.say(
            f"round {current.round}: {len(contributors)} usable files ({have} of {len(members)} active members), "
            f"{deadline}; it closes when every active member has one, or at the deadline with >= "
            f"{rules.min_contributors}"
        )

    def _latest_version(self) -> int:
        latest = self.client.pool.latest_checkpoint(self.pool_id)
        return latest.version if latest.published_at else 0


def append_round(state_dir: Path, row: dict[str, Any]) -> None:
    """Append one JSON line to `<state_dir>/rounds.jsonl` (the devnet's live view and the bench read it)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    with (state_dir / ROUNDS_FILE).open("a") as handle:
        handle.write(json.dumps(row, sort_keys=True) + "\n")


def read_rounds(state_dir: Path) -> list[dict[str, Any]]:
    """The lines of `<state_dir>/rounds.jsonl` (none when it does not exist); a torn last line is skipped."""
    path = state_dir / ROUNDS_FILE
    if not path.exists():
        return []
    rows = []
    for text in path.read_text().splitlines():
        try:
            rows.append(json.loads(text))
        except json.JSONDecodeError:
            continue
    return rows


def run_aggregator(
    config: AggregatorConfig,
    client: ChainClient,
    store: ObjectStore,
    ledger: LedgerClient,
    *,
    stop: threading.Event | None = None,
    say: Callable[[str], None] = print,
) -> int:
    """`Aggregator(...).run()`: the CLI's entry point; returns the latest published version."""
    return Aggregator(config, client, store, ledger, stop=stop, say=say).run()

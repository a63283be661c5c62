"""The provider node's agent: heartbeat -> model -> generate -> journal -> upload -> submit.

`WorkerNode.run()` is what `proofpool worker run` does. Before any work it checks, on-chain,
that the node is registered and its provider has enough stake, announces the node to the
backend and makes sure it is a member of the pool (fetching an invite and joining by itself
unless told to wait for its provider). Then it loops, one assignment per turn:

1. heartbeat (reporting the batch it just journaled, or an assignment it cannot serve);
2. resolve the assigned checkpoint to a verified local directory and (re)load the engine;
3. generate the batch, prove, score, write the Parquet file, journal it (durable first);
4. hand the journaled batch to the submitter thread, which uploads it through a presigned URL
   and sends `submitWork` with the node key (each retried) while the loop already generates the
   next batch: network time overlaps generation instead of adding to it. Batches that were
   waiting for the submitter together (the chain or the store lagged) go out as one
   `submitWorkBundle` per (pool, version), at most `max_bundle` files each;
5. send the next heartbeat (reporting this batch) in the background and, while it travels,
   generate the batch it should assign, the next of the same checkpoint: kept if the answer
   assigns exactly that, dropped if not (`proofpool.worker.lookahead`).

Faults: anything transient (backend, store or RPC down, a timeout) is retried with backoff and
logged with pool, node and work key; a backend that answers as if a node that just (re)joined
were not a member is waited for, within a bound (`proofpool.worker.membership`). A heartbeat
line is logged at most once a minute (`proofpool.worker.heartbeat_log`). A restarted worker
finishes what its journal holds before new work and never generates a journaled batch again
(see `proofpool.worker.journal`). `stop` (set on SIGTERM) is checked between steps and cuts
retry waits short: the current batch is finished if it is past generation and the services
answer, else left in the journal for the next start.

A training pool (model URI `diloco://`) has no assignments: after the same start-up the node runs
the train-mode loop of `proofpool.worker.train` (one update file per round), with this node's
heartbeat, journal, upload and submit steps.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence, Set
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
from eth_account.signers.local import LocalAccount
from proofpool.worker.console import WorkerConsole
from proofpool.worker.engine import EngineConfig
from proofpool.worker.heartbeat_log import HeartbeatLog
from proofpool.worker.journal import PENDING_STATES, BatchState, Journal, JournalEntry
from proofpool.worker.lookahead import Generated, Lookahead, next_assignment
from proofpool.worker.membership import JOIN_INDEX_TIMEOUT, JoinIndexWait
from proofpool.worker.models import EngineSlot, ModelResolver, Unservable
from proofpool.worker.retry import Backoff, Stopped, is_transient, retry, sleep_unless_stopped
from proofpool.worker.rollout import RolloutFile, generate_rollout_file
from proofpool.worker.strategy import Honest, RolloutStrategy
from proofpool.worker.submit import (
    DEFAULT_MAX_BUNDLE,
    Bundle,
    SubmitRefused,
    Submitted,
    group_waiting,
    stale_reason,
    submit,
    submit_bundle,
    upload,
)

from proofpool.core.environment import Environment, Taskset
from proofpool.core.errors import ProofpoolError
from proofpool.core.rollout import RolloutFileMeta
from proofpool.envs import pool_environment
from proofpool.infra.chain.bindings import MemberState, PoolInfo, PoolStatus
from proofpool.infra.chain.client import ChainClient
from proofpool.infra.chain.errors import ContractRevert
from proofpool.infra.chain.gas import require_gas
from proofpool.infra.chain.units import format_pool
from proofpool.infra.http.node_api import Assignment, BatchRef, Heartbeat, NodeApi
from proofpool.infra.http.node_api import Unservable as UnservableReport
from proofpool.infra.http.signed_client import ApiRefused
from proofpool.infra.storage.s3 import ObjectStore
from proofpool.training.published import is_training_pool

if TYPE_CHECKING:
    from proofpool.worker.train import TrainStrategy

log = logging.getLogger(__name__)

INDEXER_LAG_ERRORS = frozenset({"node_not_registered", "node_not_announced", "chain_unknown", "pool_not_approved"})
"""Refusals that mean "the backend has not indexed the chain change yet": wait, then ask again."""
NOT_MEMBER_STATES = frozenset({"ejected", "banned"})
"""Heartbeat states of a node the backend does not count as a member (a rejoin it has not indexed yet)."""

SHUTDOWN_SECONDS = 25.0
"""How long a stopping worker lets its submitter finish (SIGTERM must end the process within 30 s)."""
QUEUE_DEPTH = 2
"""Journaled batches that may wait for the submitter before generation pauses."""
JOIN_ATTEMPTS = 5
"""`joinPool` reverts tolerated (an invite raced by a membership change) before giving up."""
TRAIN_WINDOW = 1
"""A training pool's window for `stale_reason`: an update file of round r is sent only while r is
the latest version (once r+1 is published the round is closed and the file would be stale)."""


class NodeNotReady(ProofpoolError):
    """The node cannot work for the pool (not registered, too little stake, slashed, ...)."""


@dataclass(frozen=True)
class WorkerConfig:
    """How one worker process serves one pool."""

    pool_id: int
    state_dir: Path
    """This node's journal and unsubmitted files."""
    checkpoint_cache_dir: Path
    base_model: Path | None = None
    """Local directory of the pool's version-0 model when it is not a devnet model."""
    engine: EngineConfig = field(default_factory=EngineConfig)
    join: bool = True
    """Fetch an invite and join by itself; False: wait for the provider to join the node."""
    max_batches: int | None = None
    """Stop after submitting this many new batches (rounds, in a training pool; benchmarks, tests);
    None: run until stopped."""
    idle_interval: float | None = None
    """Seconds between heartbeats while there is no work; None: the backend's heartbeat interval."""
    async_window: int = 2
    """The validators' version window: a journaled batch older than latest - window is not submitted."""
    max_bundle: int = DEFAULT_MAX_BUNDLE
    """Files sent together as one `submitWorkBundle` at most (those already waiting); 1: always `submitWork`."""
    backoff: Backoff = field(default_factory=Backoff)
    join_index_timeout: float = JOIN_INDEX_TIMEOUT
    """Seconds the backend may answer as if the node had not (re)joined before the worker gives up."""
    specs: dict[str, Any] = field(default_factory=dict)
    strategy: RolloutStrategy = field(default_factory=Honest)
    """How rollout files are made and sent (`proofpool.worker.strategy`): honest, except in devnet drills."""
    train_strategy: TrainStrategy | None = None
    """How a training pool's pseudo-gradients are made (`proofpool.worker.train`); None: honestly."""


class WorkerNode:
    """One node key working for one pool."""

    def __init__(
        self,
        config: WorkerConfig,
        account: LocalAccount,
        client: ChainClient,
        api: NodeApi,
        store: Callable[[], ObjectStore],
        console: WorkerConsole,
        stop: threading.Event | None = None,
    ) -> None:
        self.config = config
        self.node = account.address
        self.client = client
        self.api = api
        self.console = console
        self.stop = stop or threading.Event()
        self.journal = Journal(config.state_dir)
        self.store = store
        self.models = ModelResolver(client, store, config.checkpoint_cache_dir, config.base_model, console.say)
        self.engines = EngineSlot(config.engine, console.say)
        self.strategy = config.strategy
        self.generated = 0
        self.submitted = 0
        self._to_report: JournalEntry | None = None
        self._unservable: UnservableReport | None = None
        self._submitter = Submitter(self)
        self._lookahead = Lookahead()
        self._uploads = httpx.Client(timeout=120.0)
        """One client for every presigned PUT (used by the submitter thread only)."""
        self._environment: Environment | None = None
        self._spec_sha256: bytes | None = None
        self.training = False
        """The pool is a training pool (`diloco://`): the train-mode loop runs, not assignments."""
        self._heartbeats = HeartbeatLog(config.pool_id, self.node)
        # Bounded waits for the backend's indexer to see a (re)join: the loop's heartbeats, the submitter's uploads.
        self._beat_membership = JoinIndexWait(config.pool_id, self.node, "heartbeats", config.join_index_timeout)
        self._upload_membership = JoinIndexWait(config.pool_id, self.node, "upload requests", config.join_index_timeout)

    @property
    def environment(self) -> Environment:
        """The pool's environment, the one its on-chain model URI names (looked up once)."""
        if self._environment is None:
            self._adopt(self._chain(lambda: self.client.pool.get_pool(self.config.pool_id), "pool lookup"))
        assert self._environment is not None
        return self._environment

    @property
    def spec_sha256(self) -> bytes:
        """The pool's on-chain `specSha256` (zero bytes: no spec), which every file of this node carries."""
        if self._spec_sha256 is None:
            self._adopt(self._chain(lambda: self.client.pool.get_pool(self.config.pool_id), "pool lookup"))
        assert self._spec_sha256 is not None
        return self._spec_sha256

    def _adopt(self, pool: PoolInfo) -> None:
        """Take the pool's environment and spec hash from its on-chain record, once they agree
        (a training pool has no environment: `proofpool.worker.train` checks its spec)."""
        self.training = is_training_pool(pool.model_uri)
        if not self.training:
            self._environment = _environment_of(pool)
        self._spec_sha256 = pool.spec_sha256

    @property
    def taskset(self) -> Taskset:
        """The pool's task set: its problems, prompts and rewards."""
        return self.environment.taskset

    # --- start-up ---------------------------------------------------------------------------

    def run(self) -> None:
        """Work until stopped (or `max_batches` new submissions); returns normally on stop."""
        try:
            provider = self.preflight()
            trainer = None
            if self.training:
                from proofpool.worker.train import TrainNode  # that module imports this one

                trainer = TrainNode(self, self.config.train_strategy)
                trainer.prepare()  # the pool's spec and dataset must be readable before the node joins
            self.announce(provider)
            self.ensure_member()
            self.resume()
            if trainer is not None:
                trainer.run()
            else:
                self._submitter.start()
                while not self.stop.is_set() and not self._done():
                    self._submitter.raise_failure()
                    self.turn()
                if self._to_report is not None and not self.stop.is_set():
                    self.heartbeat()  # tell the backend about the last batch before leaving
        except Stopped:
            pass
        finally:
            self._lookahead.close()
            self._submitter.drain(timeout=SHUTDOWN_SECONDS)
            self.engines.close()
            self.journal.close()
            self._uploads.close()
        self._submitter.raise_failure()
        self.console.say(f"stopped after {self.submitted} new submission(s)")

    def preflight(self) -> str:
        """The node's provider, after checking on-chain that the node may work for the pool."""
        pool_id, node = self.config.pool_id, self.node
        provider = self._chain(lambda: self.client.registry.active_node_provider(node), "registry lookup")
        if provider is None:
            raise NodeNotReady(
                f"node {node} is not registered (or was removed) in the ComputeRegistry; its provider adds it "
                f"with `proofpool provider add-node --node {node} --signature ...`"
            )
        stake = self.client.stake_manager
        active, required = stake.active_stake(provider), stake.required_stake(provider)
        if active < required:
            raise NodeNotReady(
                f"provider {provider} has {format_pool(active)} POOL staked but its compute units need "
                f"{format_pool(required)}; stake more with `proofpool provider stake`"
            )
        if pool_id == 0 or pool_id > self.client.pool.pool_count():
            raise NodeNotReady(f"pool {pool_id} does not exist on this chain")
        pool = self.client.pool.get_pool(pool_id)
        if pool.status is PoolStatus.CLOSED:
            raise NodeNotReady(f"pool {pool_id} is closed")
        self._adopt(pool)  # its environment must be installed, and the pool consistent, before the node joins
        self._check_not_barred()
        require_gas(self.client.w3, node, 1, "the node pays for its own submitWork; its provider sends it ETH")
        self.console.say(f"node {node} of provider {provider}: stake {format_pool(active)} POOL, pool {pool_id} ok")
        return provider

    def announce(self, provider: str) -> None:
        """Tell the backend about the node (waiting out indexer lag after `add-node`)."""
        retry(
            lambda: self.api.announce(provider=provider, specs=self.config.specs),
            what="announce",
            stop=self.stop,
            backoff=self.config.backoff,
            transient=_transient_or_lag,
            context=self._context(),
        )

    def ensure_member(self) -> None:
        """Become an active member of the pool: join with an invite, or wait for the provider to."""
        pool_id = self.config.pool_id
        reverts = 0
        while self.client.pool.get_member(pool_id, self.node).state is not MemberState.ACTIVE:
            self._check_not_barred()
            if not self.config.join:
                self.console.say(f"waiting for the provider to join node {self.node} to pool {pool_id}")
                sleep_unless_stopped(self.stop, self.config.idle_interval or 5.0)
                continue
            provider = self._chain(lambda: self.client.registry.active_node_provider(self.node), "registry lookup")
            if provider is not None and not self.client.pool.pool_approval(pool_id, provider).approved:
                self.console.say(
                    f"waiting for provider {provider} to approve pool {pool_id} "
                    f"(`proofpool provider approve-pool {pool_id} --max-slash AMOUNT`)"
                )
                sleep_unless_stopped(self.stop, self.config.idle_interval or 5.0)
                continue
            signed = retry(
                lambda: self.api.get_invite(self.node, pool_id),
                what="invite",
                stop=self.stop,
                backoff=self.config.backoff,
                transient=_transient_or_lag,
                context=self._context(),
            )
            try:
                invite = signed.invite
                self._chain(lambda: self.client.pool.join_pool(invite), "joinPool")  # noqa: B023 - called here
                self.console.say(f"joined pool {pool_id} with invite {signed.invite.nonce}")
            except ContractRevert as revert:
                reverts += 1
                if reverts >= JOIN_ATTEMPTS:
                    raise NodeNotReady(f"joinPool keeps reverting for node {self.node}: {revert}") from revert
                log.warning("joinPool reverted, asking again: %s", revert, extra=self._context())
                sleep_unless_stopped(self.stop, self.config.backoff.delay(reverts))

    def resume(self) -> None:
        """Finish what the journal holds from an earlier run (files not yet on-chain)."""
        removed = self.journal.remove_orphans()
        if removed:
            log.info("removed %d orphaned file(s)", removed, extra=self._context())
        pending = self.journal.in_state(self.config.pool_id, *PENDING_STATES)
        for entry in pending:
            self.console.say(f"resuming batch {entry.batch} of v{entry.version} ({entry.state.value})")
        if pending:
            self.finish_all([(entry, False) for entry in pending])
        unreported = self.journal.unreported(self.config.pool_id)
        if unreported and not self.training:  # a training pool's heartbeat reports no batches
            self._to_report = unreported[-1]

    # --- the loop ---------------------------------------------------------------------------

    def turn(self) -> None:
        """One heartbeat and, if it carries work, one batch. After a batch, the next heartbeat goes
        out in the background while the batch it should assign is generated (`proofpool.worker.lookahead`)."""
        early = self._lookahead.generate(self._generate)
        beat = self.heartbeat_as_member(lambda: self._lookahead.answer() or self.heartbeat())
        if beat is None:
            return
        a = beat.assignment
        if a is None:
            if (w := beat.withheld) is not None:
                self.console.say(
                    f"batch {w.batch} withheld: {w.unsubmitted} earlier batches are not on-chain yet "
                    f"(at most {w.max_unsubmitted}); next heartbeat in {self._idle(beat):.0f} s"
                )
            else:
                self.console.say(f"node state {beat.state}: no assignment; next heartbeat in {self._idle(beat):.0f} s")
            if beat.state in NOT_MEMBER_STATES:
                self.rejoin(f"heartbeat state {beat.state}")
            sleep_unless_stopped(self.stop, self._idle(beat))
            return
        known = self.journal.get(a.pool_id, a.checkpoint_version, a.batch)
        if known is not None:  # journaled before (a restart, or a report the backend missed)
            if known.state in PENDING_STATES:
                self._submitter.put(known, None)
            self._to_report = known
            return
        try:
            path = retry(
                lambda: self.strategy.model_path(a, self.models.resolve),
                what="checkpoint",
                stop=self.stop,
                backoff=self.config.backoff,
                context={**self._context(), "version": a.checkpoint_version},
            )
        except Unservable as problem:
            self.skip(a.checkpoint_version, a.batch, problem)
            sleep_unless_stopped(self.stop, self._idle(beat))
            return
        made = early
        if made is None or made.assignment != a or made.model != path:
            if made is not None:
                ahead = made.assignment
                log.info(
                    "batch generated ahead dropped: the heartbeat assigned another",
                    extra={**self._context(), "version": ahead.checkpoint_version, "batch": ahead.batch},
                )
            made = self._generate(a, path)
        rollout, seconds = made.rollout, made.seconds
        entry = self.journal.record_written(
            a.pool_id, a.checkpoint_version, a.batch, rollout.sha256, rollout.data, rollout.work_units, rollout.samples
        )
        log.info(
            "batch written",
            extra={
                **self._context(entry),
                "samples": rollout.samples,
                "size": len(rollout.data),
                "seconds": round(seconds, 3),  # generate + prove + write: bench/e2e.py reads it
            },
        )
        self.generated += 1
        self._to_report = entry
        self._submitter.put(entry, seconds)
        if not self._done() and not self.stop.is_set():
            self._lookahead.send(self.heartbeat, next_assignment(self.taskset, a, self.node), path)

    def _generate(self, a: Assignment, path: Path) -> Generated:
        """Generate, prove, score and serialize the batch of `a` on the model in `path`, timed."""
        engine = self.engines.get(path, self.environment.tokens.max_prompt_tokens + a.max_tokens)
        self.console.checkpoint(a.checkpoint_version)
        started = time.monotonic()
        meta = RolloutFileMeta(a.pool_id, self.node, self.spec_sha256)

        def generate() -> RolloutFile:
            return generate_rollout_file(
                engine,
                self.taskset,
                meta,
                a.task_ids,
                group_size=a.group_size,
                sampling_seed=a.sampling_seed,
                temperature=a.temperature,
                max_tokens=a.max_tokens,
                stop_ids=self.environment.tokens.stop_ids,
                model_version=a.checkpoint_version,
            )

        rollout = self.strategy.make_file(a, meta, generate)
        return Generated(a, path, rollout, time.monotonic() - started)

    def heartbeat(self, stop: threading.Event | None = None) -> Heartbeat:
        """Heartbeat, carrying the pending report; marks the reported batch once the backend took it.
        `stop` (default: the node's) ends the retries of a backend that does not answer."""
        report, problem = self._to_report, self._unservable
        completed = None if report is None else BatchRef(report.version, report.batch)
        beat = retry(
            lambda: self.api.heartbeat(self.config.pool_id, completed=completed, unservable=problem),
            what="heartbeat",
            stop=stop or self.stop,
            backoff=self.config.backoff,
            transient=_transient_or_lag,
            context=self._context(),
        )
        if report is not None:
            self.journal.mark_reported(report)
            self._to_report = None
        self._unservable = None
        if beat.state not in NOT_MEMBER_STATES:
            self._beat_membership.seen()
        self._heartbeats.answered(beat)
        return beat

    def heartbeat_as_member(self, beat: Callable[[], Heartbeat]) -> Heartbeat | None:
        """`beat()`, or None when the backend refused it as from a non-member of the pool: then the
        node has joined again (where the chain agrees) and waited a backoff for the indexer."""
        try:
            return beat()
        except ApiRefused as refused:
            if refused.error != "not_pool_member":
                raise
            answers = self.rejoin(f"{refused.status} {refused.error}")
            sleep_unless_stopped(self.stop, self.config.backoff.delay(answers))
            return None

    def finish(self, entry: JournalEntry, fresh: bool = False) -> JournalEntry:
        """Upload and submit a journaled batch; abandons it (keeping the file) if the chain refuses,
        or if its version fell out of the pool's window while it waited (a worker restarted after a
        long outage): validators would reject it as stale and the node would be slashed.

        A `fresh` batch (generated moments ago from the current assignment) skips the check before
        the upload; `submit` still checks right before `submitWork`, which is the check that counts.
        """
        window = self._window()
        if window is not None and not fresh:  # before the upload too: no point storing what will not be sent
            stale = self._chain(lambda: stale_reason(self.client, entry, window), "staleness")
            if stale is not None:
                return self._abandon(entry, stale)
        return self.send(self.store_file(entry), fresh)

    def store_file(self, entry: JournalEntry) -> JournalEntry:
        """Upload the file of a `written` entry through a presigned URL (an uploaded one as it is)."""
        if entry.state is not BatchState.WRITTEN:
            return entry
        data = self.journal.read_file(entry)
        key = upload(self.api, entry, data, self.stop, self.config.backoff, self._uploads, self._upload_membership)
        entry = self.journal.set_state(entry, BatchState.UPLOADED)
        log.info("uploaded", extra={**self._context(entry), "key": key})
        return entry

    def send(self, entry: JournalEntry, fresh: bool = False) -> JournalEntry:
        """`submitWork` for an uploaded entry (`proofpool.worker.submit.submit`); abandons it
        (keeping the file) if the chain refuses or its version left the window. An entry planned
        into a bundle before (a restart) goes out as that whole bundle (`send_all`)."""
        done = self.send_all([entry], frozenset({entry.work_key}) if fresh else frozenset())
        return next((d for d in done if d.work_key == entry.work_key), None) or self.journal.refreshed(entry)

    def finish_all(self, waiting: Sequence[tuple[JournalEntry, bool]]) -> list[JournalEntry]:
        """`finish` for batches waiting together, each (entry, fresh): every file is uploaded first,
        then those of one (pool, on-chain version) go out as one `submitWorkBundle` (at most
        `max_bundle` files; one file: `submitWork`). Returns the entries it moved on (submitted or
        abandoned), those of files a restored bundle brought along included.

        Entries are re-read from the journal first and skipped unless still pending (one queued twice
        may be on-chain by now); a file already planned into a submission is sent only as that whole
        submission (the journal's rule)."""
        window = self._window()
        uploaded: list[JournalEntry] = []
        done: list[JournalEntry] = []
        fresh_keys: set[bytes] = set()
        for given, fresh in waiting:
            entry = self.journal.refreshed(given)
            if entry.state not in PENDING_STATES:
                continue
            if window is not None and not fresh and entry.submission is None:
                stale = self._chain(lambda e=entry: stale_reason(self.client, e, window), "staleness")
                if stale is not None:
                    done.append(self._abandon(entry, stale))
                    continue
            uploaded.append(self.store_file(entry))
            if fresh:
                fresh_keys.add(entry.work_key)
        return done + self.send_all(uploaded, fresh_keys)

    def send_all(self, entries: Sequence[JournalEntry], fresh_keys: Set[bytes] = frozenset()) -> list[JournalEntry]:
        """Submit uploaded `entries` and return them moved on: those planned before as their recorded
        submission (the whole of it), the others grouped (`group_waiting`; a file of no work units
        alone, as the chain refuses it in a bundle) and planned in the journal before they are sent.
        A submission is looked up on-chain before its first send unless all its files are in
        `fresh_keys` (generated by this process) and it was planned just now."""
        done: list[JournalEntry] = []
        handled: set[bytes] = set()
        unplanned: list[JournalEntry] = []
        for entry in entries:
            if entry.work_key in handled:
                continue
            if entry.submission is None:
                unplanned.append(entry)
                continue
            files = self.journal.planned(entry.pool_id, entry.submission)
            if not files:  # on-chain or abandoned since it was read
                continue
            handled.update(e.work_key for e in files)
            done += self._send_planned(entry.submission, files, look_up=True)
        limit = 1 if self.training else self.config.max_bundle
        for group in group_waiting(unplanned, limit, self._kind):
            if len(group) > 1 and any(e.work_units <= 0 for e in group):
                group, empty = [e for e in group if e.work_units > 0], [e for e in group if e.work_units <= 0]
                for entry in empty:  # submitWork refuses it too; abandoned after its retries, as ever
                    done += self._send_planned(entry.work_key, self.journal.plan([entry], entry.work_key), True)
                if not group:
                    continue
            look_up = any(e.work_key not in fresh_keys for e in group)
            key = group[0].work_key if len(group) == 1 else self._bundle(group).key
            done += self._send_planned(key, self.journal.plan(group, key), look_up)
        return done

    def _send_planned(self, key: bytes, files: Sequence[JournalEntry], look_up: bool) -> list[JournalEntry]:
        """Send the submission `key` the journal planned `files` into (their own key: `submitWork`;
        a bundle key: `submitWorkBundle`); record them submitted, or abandon them all (files kept)
        when the chain refuses, the version left the window, or the files no longer make that key."""
        backoff, window = self.config.backoff, self._window()
        try:
            if len(files) == 1 and files[0].work_key == key:
                entry = files[0]
                sent = submit(self.client, self.strategy.on_chain(entry), self.stop, backoff, window, fresh=not look_up)
            else:
                bundle = self._bundle(files)
                if bundle.key != key:
                    return self._abandon_all(
                        files, key, f"the journal's files of bundle 0x{key.hex()} make key 0x{bundle.key.hex()}"
                    )
                sent = submit_bundle(self.client, bundle, self.stop, backoff, window, fresh=not look_up)
        except SubmitRefused as refused:
            return self._abandon_all(files, key, str(refused))
        self._log_submitted(key, files, sent)
        return self.journal.set_states(files, BatchState.SUBMITTED, tx_hash=sent.tx_hash)

    def _bundle(self, files: Sequence[JournalEntry]) -> Bundle:
        """The bundle of `files` as the chain gets them (the strategy's `on_chain` view of each)."""
        return Bundle.of([self.strategy.on_chain(e) for e in files])

    def _kind(self, entry: JournalEntry) -> tuple[int, int]:
        """What files must share to go out together: the pool and the model version claimed on-chain."""
        return entry.pool_id, self.strategy.on_chain(entry).version

    def _log_submitted(self, key: bytes, files: Sequence[JournalEntry], sent: Submitted) -> None:
        first = files[0]
        context = {
            **self._context(first),
            "work_key": "0x" + key.hex(),
            "files": len(files),
            "batches": ",".join(str(e.batch) for e in files),
            "tx": sent.tx_hash,
            "units": sum(e.work_units for e in files),
        }
        if len(files) == 1:
            log.info("submitted", extra=context)
            return
        log.info("submitted a bundle of %d files as 0x%s", len(files), key.hex(), extra=context)
        sent_as = f"tx {sent.tx_hash[:12]}…" if sent.tx_hash else "already on-chain"
        self.console.say(
            f"bundle of {len(files)} files (batches {context['batches']}) as 0x{key.hex()[:10]}… {sent_as}"
        )

    # --- helpers ----------------------------------------------------------------------------

    def _abandon(self, entry: JournalEntry, why: str) -> JournalEntry:
        log.error("submission abandoned: %s", why, extra=self._context(entry))
        self.console.say(f"[red]batch {entry.batch} abandoned[/red]: {why}")
        return self.journal.set_state(entry, BatchState.ABANDONED, error=why)

    def _abandon_all(self, files: Sequence[JournalEntry], key: bytes, why: str) -> list[JournalEntry]:
        """Abandon every file of the submission `key` together (a bundle is sent whole or not at all)."""
        if len(files) == 1:
            return [self._abandon(files[0], why)]
        batches = ", ".join(str(e.batch) for e in files)
        extra = {**self._context(files[0]), "work_key": "0x" + key.hex(), "files": len(files)}
        log.error("bundle of %d files abandoned: %s", len(files), why, extra=extra)
        self.console.say(f"[red]batches {batches} (bundle 0x{key.hex()[:10]}…) abandoned[/red]: {why}")
        return self.journal.set_states(files, BatchState.ABANDONED, error=why)

    def skip(self, version: int, batch: int, problem: Unservable) -> None:
        """Give up on checkpoint `version` (batch `batch`) and report why in the next heartbeat."""
        log.warning(
            "assignment skipped: %s",
            problem,
            extra={**self._context(), "version": version, "batch": batch, "reason": problem.reason},
        )
        self.console.say(f"[yellow]cannot serve checkpoint {version}[/yellow]: {problem}")
        self._unservable = UnservableReport(version, batch, problem.reason, problem.detail)

    def rejoin(self, answer: str) -> int:
        """The backend answered `answer` as if the node were not a member of the pool: join again
        where the chain agrees (or stop: slashed, blacklisted), then wait for the backend's indexer
        to see the membership, `JoinNotIndexed` past the bound. Returns the answers so far (a backoff index)."""
        self.ensure_member()
        return self._beat_membership.waiting(answer)

    def _check_not_barred(self) -> None:
        member = self.client.pool.get_member(self.config.pool_id, self.node)
        if member.state is MemberState.SLASHED:
            raise NodeNotReady(f"node {self.node} was slashed in pool {self.config.pool_id} and may not rejoin")
        if member.blacklisted:
            raise NodeNotReady(f"node {self.node} is blacklisted in pool {self.config.pool_id}")

    def _chain(self, fn: Callable[[], Any], what: str) -> Any:
        return retry(fn, what=what, stop=self.stop, backoff=self.config.backoff, context=self._context())

    def _window(self) -> int | None:
        """The versions a file may lag the latest when it is sent (None: not checked)."""
        if self.training:
            return TRAIN_WINDOW
        return self.config.async_window if self.strategy.checks_staleness else None

    def _idle(self, beat: Heartbeat) -> float:
        return self.config.idle_interval or beat.heartbeat_interval

    def _done(self) -> bool:
        return self.config.max_batches is not None and self.generated >= self.config.max_batches

    def _context(self, entry: JournalEntry | None = None) -> dict[str, Any]:
        context: dict[str, Any] = {"pool": self.config.pool_id, "node": self.node}
        if entry is not None:
            context.update(work_key="0x" + entry.work_key.hex(), version=entry.version, batch=entry.batch)
        return context


class Submitter:
    """The thread that uploads and submits journaled batches, in order.

    It takes the next batch and, unless `max_bundle` is 1, every batch already waiting behind it
    (`WorkerNode.finish_all`: uploaded, then one `submitWorkBundle` per pool and version). Nothing
    waits for company: a batch alone in the queue goes out at once as `submitWork`; bundles form
    only when batches pile up while the chain, the store or the submitter lags.

    Its queue holds at most `QUEUE_DEPTH` batches: when uploads stall, generation stops after a
    couple of batches instead of piling files up. A failure that is not transient (a bug, a store
    that refuses the upload for good) stops the thread and is raised again in the worker loop.
    """

    def __init__(self, node: WorkerNode) -> None:
        self._node = node
        self._queue: queue.Queue[tuple[JournalEntry, float | None]] = queue.Queue(maxsize=QUEUE_DEPTH)
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._run, name="submitter", daemon=True)
        self._in_flight: set[bytes] = set()
        self._lock = threading.Lock()
        self._failure: BaseException | None = None

    def start(self) -> None:
        self._thread.start()

    def put(self, entry: JournalEntry, generate_seconds: float | None) -> None:
        """Queue `entry` (skipped if it is queued or being submitted already); blocks while the queue is full.

        `generate_seconds` is None for a batch journaled earlier (a restart), which is checked for
        staleness before its upload too (`WorkerNode.finish`).
        """
        with self._lock:
            if entry.work_key in self._in_flight:
                return
            self._in_flight.add(entry.work_key)
        while True:
            self.raise_failure()
            try:
                self._queue.put((entry, generate_seconds), timeout=0.5)
                return
            except queue.Full:
                if self._node.stop.is_set():
                    raise Stopped("stopped while the submitter was busy") from None

    def drain(self, timeout: float) -> None:
        """Let the queued batches finish, then end the thread; past `timeout`, ask it to stop after
        its current try (what is not submitted stays journaled for the next start)."""
        self._closing.set()
        if not self._thread.is_alive():
            return
        self._thread.join(timeout)
        if self._thread.is_alive():
            self._node.stop.set()
            self._thread.join(5.0)

    def raise_failure(self) -> None:
        if self._failure is not None:
            raise self._failure

    def _run(self) -> None:
        node = self._node
        while True:
            try:
                first = self._queue.get(timeout=0.2)
            except queue.Empty:
                if self._closing.is_set():  # set by `drain`, after the loop queued its last batch
                    return
                continue
            waiting = [first, *self._waiting()]
            try:
                done = node.finish_all([(entry, seconds is not None) for entry, seconds in waiting])
            except Stopped:
                return  # the files stay journaled: the next start submits them
            except BaseException as exc:  # noqa: BLE001 - handed to the worker loop, which raises it
                self._failure = exc
                return
            finally:
                with self._lock:
                    self._in_flight.difference_update(entry.work_key for entry, _ in waiting)
            generated = {entry.work_key: seconds for entry, seconds in waiting}
            for entry in done:
                if entry.state is not BatchState.SUBMITTED:
                    continue
                node.submitted += 1
                seconds = generated.get(entry.work_key)
                if seconds is not None:
                    node.console.batch_done(
                        entry.pool_id,
                        entry.batch,
                        entry.samples,
                        entry.work_units,
                        seconds,
                        entry.work_key,
                        entry.tx_hash,
                    )

    def _waiting(self) -> list[tuple[JournalEntry, float | None]]:
        """The batches queued right now, without waiting for more (none when bundling is off)."""
        if self._node.config.max_bundle <= 1:
            return []
        taken: list[tuple[JournalEntry, float | None]] = []
        while True:
            try:
                taken.append(self._queue.get_nowait())
            except queue.Empty:
                return taken


def _environment_of(pool: PoolInfo) -> Environment:
    """The environment of `pool` as created on-chain; a node without it cannot work (not installed
    here, a spec this machine does not reproduce, or a spec hash its model URI does not name)."""
    try:
        return pool_environment(pool.model_uri, pool.spec_sha256)
    except ProofpoolError as exc:
        raise NodeNotReady(f"pool {pool.pool_id}: {exc}") from exc


def _transient_or_lag(exc: BaseException) -> bool:
    """Transient failures, plus refusals that only mean the backend's indexer lags the chain."""
    if isinstance(exc, ApiRefused) and exc.error in INDEXER_LAG_ERRORS:
        return True
    return is_transient(exc)

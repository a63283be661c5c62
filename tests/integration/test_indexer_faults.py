"""The indexer under faults, all real: SIGKILL mid-batch and restart, reorgs made on anvil,
PostgreSQL connections dropped or refused, and dispatch to a real Celery worker process when
the dispatcher dies between commit and send, or between send and mark.

"Mid-batch" is made deterministic, not timed: the test takes an EXCLUSIVE lock on
`chain_blocks`, so the indexer blocks inside its range transaction (after writing the range's
raw events, before its blocks, projections, outbox rows and cursor) and the fault hits it there.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import psycopg
import pytest
import redis
from proofpool.backend.indexer.follow import APPLICATION_NAME
from proofpool.backend.indexer.outbox import CelerySender, Dispatcher

from proofpool.infra.broker import make_celery, task_id_for
from proofpool.infra.chain.anvil import free_port
from proofpool.infra.chain.bindings import WorkStatus
from proofpool.infra.chain.client import ChainClient
from proofpool.infra.config import REPO_ROOT, Settings
from tests.celery_probe import RECEIVED, SENTINELS
from tests.fixtures.indexer import (
    PROJECTIONS,
    build_bulk_world,
    indexer_env,
    make_indexer,
    outbox_keys,
    query,
    snapshot,
    spawn_indexer,
    submitted_keys,
)
from tests.fixtures.postgres import truncate_all
from tests.fixtures.processes import stop

WAIT = 60.0
PENDING_TASKS = "SELECT count(*) FROM outbox WHERE dispatched_at IS NULL"


def wait_for(condition: Callable[[], object], what: str, timeout: float = WAIT) -> object:
    """Poll `condition` until it is truthy; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def cursor(url: str) -> int:
    rows = query(url, "SELECT next_block FROM indexer_state")
    return rows[0][0] if rows else -1


def indexer_backends(url: str, waiting_on_lock: bool = False) -> list[int]:
    sql = "SELECT pid FROM pg_stat_activity WHERE application_name = %s AND datname = current_database()"
    if waiting_on_lock:
        sql += " AND wait_event_type = 'Lock'"
    return [pid for (pid,) in query(url, sql, (APPLICATION_NAME,))]


@contextmanager
def blocks_locked(url: str) -> Iterator[None]:
    """Hold an EXCLUSIVE lock on chain_blocks: range transactions block on their block upsert."""
    with psycopg.connect(url) as conn:
        conn.execute("LOCK TABLE chain_blocks IN EXCLUSIVE MODE")
        try:
            yield
        finally:
            conn.rollback()


def clean_run_snapshot(url: str, world) -> dict[str, list[tuple]]:
    """What an uninterrupted run gives: truncate, index everything in-process, snapshot."""
    truncate_all(url)
    make_indexer(world.market.w3, world.book, url, batch_blocks=2).run(once=True)
    return snapshot(url)


def without_dispatch_state(snap: dict[str, list[tuple]]) -> dict[str, list[tuple]]:
    return {t: rows for t, rows in snap.items() if t != "outbox"} | {"outbox": sorted(snap["outbox"])}


def assert_consistent_cut(url: str) -> None:
    """After a crash: nothing at or above the cursor, one outbox row per indexed submission."""
    next_block = cursor(url)
    assert query(url, "SELECT count(*) FROM chain_events WHERE block_number >= %s", (next_block,)) == [(0,)]
    assert query(url, "SELECT count(*) FROM chain_blocks WHERE number >= %s", (next_block,)) == [(0,)]
    assert sorted(outbox_keys(url)) == sorted(submitted_keys(url))


# --- crash and restart ----------------------------------------------------------------------


def test_sigkill_mid_batch_then_restart_gives_the_rows_of_a_clean_run(fresh_anvil, clean_database, tmp_path):
    world = build_bulk_world(fresh_anvil, 200)
    env = indexer_env(clean_database, fresh_anvil, world.book, tmp_path / "deployments")
    log_path = tmp_path / "indexer.log"
    child = spawn_indexer(env, "--no-dispatch", "--batch-blocks", "2", log_path=log_path)
    try:
        wait_for(lambda: cursor(clean_database) > world.book.deploy_block + 6, "a few committed ranges")
        with blocks_locked(clean_database):
            wait_for(lambda: indexer_backends(clean_database, waiting_on_lock=True), "the indexer inside a range")
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=10)
        # the orphaned backend gets the lock, finds its client gone, rolls back and exits
        wait_for(lambda: not indexer_backends(clean_database), "the killed session to end")
    finally:
        if child.poll() is None:
            child.kill()
    killed_at = cursor(clean_database)
    assert killed_at > world.book.deploy_block + 6
    assert_consistent_cut(clean_database)

    restarted = spawn_indexer(env, "--once", "--no-dispatch", "--batch-blocks", "7", log_path=log_path)
    assert restarted.wait(timeout=120) == 0, log_path.read_text()[-2000:]
    after_restart = snapshot(clean_database)
    assert len(submitted_keys(clean_database)) == 200
    assert without_dispatch_state(after_restart) == without_dispatch_state(clean_run_snapshot(clean_database, world))


def test_a_second_indexer_waits_for_the_first(fresh_anvil, clean_database, tmp_path):
    world = build_bulk_world(fresh_anvil, 10)
    env = indexer_env(clean_database, fresh_anvil, world.book, tmp_path / "deployments")
    first = spawn_indexer(env, "--no-dispatch", log_path=tmp_path / "first.log")
    try:
        wait_for(lambda: indexer_backends(clean_database), "the first indexer")
        second = spawn_indexer(env, "--once", "--no-dispatch", log_path=tmp_path / "second.log")
        wait_for(lambda: "waiting for the indexer lock" in (tmp_path / "second.log").read_text(), "the second to wait")
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=30) == 0
        assert second.wait(timeout=60) == 0, (tmp_path / "second.log").read_text()[-2000:]
    finally:
        for child in (first,):
            if child.poll() is None:
                child.kill()
    assert len(submitted_keys(clean_database)) == 10


# --- reorgs ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dispatched", [False, True], ids=["unsent-tasks", "sent-tasks"])
def test_anvil_reorg_is_detected_and_rolled_back(fresh_anvil, clean_database, dispatched):
    world = build_bulk_world(fresh_anvil, 0)
    market = world.market
    kept = market.submit("kept", 2, per_block=1)
    dropped = market.submit("dropped", 3, per_block=1)
    first = make_indexer(market.w3, world.book, clean_database, batch_blocks=3).run(once=True)
    assert first.reorgs == 0 and len(submitted_keys(clean_database)) == 5
    if dispatched:
        query(clean_database, "UPDATE outbox SET dispatched_at = now() RETURNING id")

    fresh_anvil.rpc("anvil_reorg", [3, []])  # the last 3 blocks (the "dropped" submissions) get new hashes
    pool = ChainClient.build(market.w3, world.book).pool
    replaced = {k for k in dropped if pool.get_work(market.pool_id, k).status is WorkStatus.NONE}
    added = market.submit("after", 2, per_block=1)
    stats = make_indexer(market.w3, world.book, clean_database, batch_blocks=3).run(once=True)

    assert stats.reorgs >= 1
    on_chain = {k for k in [*kept, *dropped, *added] if pool.get_work(market.pool_id, k).status is not WorkStatus.NONE}
    assert replaced and on_chain == set(kept) | set(added) | (set(dropped) - replaced)
    indexed = {bytes(k) for (k,) in query(clean_database, "SELECT work_key FROM submissions")}
    assert indexed == on_chain
    for key, status in query(clean_database, "SELECT work_key, status FROM submissions"):
        assert WorkStatus[status.upper()] is pool.get_work(market.pool_id, bytes(key)).status
    # no stored block or event of the old branch survives
    stored = dict(query(clean_database, "SELECT number, hash FROM chain_blocks"))
    for number, block_hash in stored.items():
        assert bytes(block_hash) == bytes(market.w3.eth.get_block(number)["hash"]), number
    outbox = set(outbox_keys(clean_database))
    live = {(market.pool_id, "0x" + k.hex()) for k in on_chain}
    gone = {(market.pool_id, "0x" + k.hex()) for k in replaced}
    # unsent tasks of removed blocks are dropped; sent ones stay (the validator reads the chain)
    assert outbox == (live | gone if dispatched else live)
    # the ledger after the reorg equals a fresh index of the new chain
    after = snapshot(clean_database, PROJECTIONS)
    truncate_all(clean_database)
    make_indexer(market.w3, world.book, clean_database).run(once=True)
    assert snapshot(clean_database, PROJECTIONS) == after


def test_snapshot_revert_then_different_blocks_is_a_reorg(fresh_anvil, clean_database):
    world = build_bulk_world(fresh_anvil, 0)
    market = world.market
    base = fresh_anvil.rpc("evm_snapshot")
    old = market.submit("old-branch", 4, per_block=1)
    make_indexer(market.w3, world.book, clean_database, batch_blocks=2).run(once=True)
    assert len(submitted_keys(clean_database)) == 4

    fresh_anvil.rpc("evm_revert", [base])  # the chain is shorter than what was indexed
    shorter = make_indexer(market.w3, world.book, clean_database).run(once=True)
    assert shorter.reorgs == 1 and submitted_keys(clean_database) == set()

    new = market.submit("new-branch", 6, per_block=1)  # longer than the old branch, other blocks
    market.attest(new[:3])
    make_indexer(market.w3, world.book, clean_database, batch_blocks=2).run(once=True)
    rows = dict(query(clean_database, "SELECT work_key, status FROM submissions"))
    assert {bytes(k) for k in rows} == set(new) and not set(old) & {bytes(k) for k in rows}
    assert sorted(rows.values()) == ["accepted"] * 3 + ["pending"] * 3
    assert query(clean_database, "SELECT count(*) FROM verdicts") == [(3,)]


def test_reorg_under_a_fresh_range_is_caught_by_the_parent_hash(fresh_anvil, clean_database):
    world = build_bulk_world(fresh_anvil, 0)
    market = world.market
    base = fresh_anvil.rpc("evm_snapshot")
    market.submit("old-branch", 3, per_block=1)
    make_indexer(market.w3, world.book, clean_database).run(once=True)
    fresh_anvil.rpc("evm_revert", [base])
    new = market.submit("new-branch", 8, per_block=1)  # the chain is longer again before we look
    stats = make_indexer(market.w3, world.book, clean_database, batch_blocks=4).run(once=True)
    assert stats.reorgs == 1
    assert {bytes(k) for (k,) in query(clean_database, "SELECT work_key FROM submissions")} == set(new)


# --- lost connections -----------------------------------------------------------------------


def test_terminated_connections_are_retried_and_nothing_is_skipped(fresh_anvil, clean_database):
    world = build_bulk_world(fresh_anvil, 150)
    indexer = make_indexer(world.market.w3, world.book, clean_database, batch_blocks=2)
    done: dict[str, object] = {}
    stop = threading.Event()
    runner = threading.Thread(target=lambda: done.setdefault("stats", indexer.run(once=True, stop=stop)))
    runner.start()
    try:
        for round_ in range(2):
            with blocks_locked(clean_database):
                pids = wait_for(
                    lambda: indexer_backends(clean_database, True), f"the indexer inside a range ({round_})"
                )
                query(clean_database, "SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", (pids,))
            wait_for(lambda r=round_: indexer.stats.retries > r, "the indexer to notice")
    finally:
        runner.join(timeout=120)
        stop.set()  # a runner still going would hold the indexer lock into the next tests
        runner.join(timeout=10)
    stats = done["stats"]
    assert stats.retries >= 2
    assert len(submitted_keys(clean_database)) == 150
    result = snapshot(clean_database)
    assert without_dispatch_state(result) == without_dispatch_state(clean_run_snapshot(clean_database, world))


class TcpProxy:
    """A loopback TCP forwarder to PostgreSQL that can go down (refusing and dropping every
    connection, as a restarting server does) and come back on the same port."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = free_port()
        self._server: socket.socket | None = None
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()

    def up(self) -> None:
        server = socket.socket()
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", self.port))
        server.listen(16)
        self._server = server
        threading.Thread(target=self._accept, args=(server,), daemon=True).start()

    def down(self) -> None:
        with self._lock:
            if self._server is not None:
                with contextlib.suppress(OSError):  # wakes the accept() blocked in its thread
                    self._server.shutdown(socket.SHUT_RDWR)
                self._server.close()
                self._server = None
            for sock in self._sockets:
                _hang_up(sock)
            self._sockets.clear()

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            with self._lock:
                if self._server is not server:
                    # went down while this connection was being made: drop it like the rest, or
                    # its server session (holding the indexer's lock) would outlive the outage
                    for sock in (client, upstream):
                        sock.close()
                    return
                self._sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                _hang_up(sock)


def _hang_up(sock: socket.socket) -> None:
    """Shut `sock` down, then close it. Shutdown first, always: a bare close() while the opposite
    pipe thread is blocked in recv() on the same socket neither wakes that thread nor sends a FIN
    (the blocked call keeps the socket open), so PostgreSQL never learns its client is gone and
    the session lives on, holding the indexer lock, after the outage is over."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()


def test_a_postgres_outage_is_waited_out(fresh_anvil, clean_database):
    world = build_bulk_world(fresh_anvil, 100)
    proxy = TcpProxy(("127.0.0.1", 5432))
    proxy.up()
    via_proxy = clean_database.replace("127.0.0.1:5432", f"127.0.0.1:{proxy.port}")
    assert via_proxy != clean_database
    # A short session timeout: should a session outlive its client anyway, the server ends it
    # (and its lock) within seconds, not never.
    indexer = make_indexer(world.market.w3, world.book, via_proxy, batch_blocks=2, session_timeout=5.0)
    done: dict[str, object] = {}
    stop = threading.Event()
    runner = threading.Thread(target=lambda: done.setdefault("stats", indexer.run(once=True, stop=stop)))
    runner.start()
    try:
        wait_for(lambda: cursor(clean_database) > world.book.deploy_block + 4, "some progress")
        before = indexer_backends(clean_database)
        proxy.down()
        wait_for(lambda: indexer.stats.retries >= 3, "the indexer to retry while the server is down")
        # The outage is over for the server too: the session that held the lock has ended.
        wait_for(lambda: not set(before) & set(indexer_backends(clean_database)), "the old sessions to end", 15)
        down_at = cursor(clean_database)
        proxy.up()
        wait_for(lambda: not runner.is_alive(), "the indexer to catch up after the outage")
    finally:
        proxy.down()
        stop.set()
        runner.join(timeout=10)
        if runner.is_alive():  # never hold the indexer lock into the next tests
            query(
                clean_database,
                "SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid",
                (indexer_backends(clean_database),),
            )
            runner.join(timeout=10)
    assert not runner.is_alive()
    stats = done["stats"]
    assert stats.retries >= 3 and stats.lock_waits == 0 and down_at < cursor(clean_database)
    assert len(submitted_keys(clean_database)) == 100
    result = snapshot(clean_database)
    assert without_dispatch_state(result) == without_dispatch_state(clean_run_snapshot(clean_database, world))


# --- dispatch to a real Celery worker -------------------------------------------------------


@dataclass
class Probe:
    """The probe worker process and what it received."""

    process: subprocess.Popen[bytes]
    redis: redis.Redis
    broker_url: str

    def received(self) -> list[dict]:
        return [json.loads(item) for item in self.redis.lrange(RECEIVED, 0, -1)]

    def sync(self) -> None:
        """Return once the worker has processed everything sent before this call."""
        token = uuid.uuid4().hex
        make_celery(Settings(broker_url=self.broker_url), "probe-sync").send_task("probe.sentinel", args=[token])
        wait_for(lambda: token.encode() in self.redis.lrange(SENTINELS, 0, -1), "the probe worker")


@pytest.fixture
def probe(indexer_redis_url: str, tmp_path) -> Iterator[Probe]:
    """A real `celery worker` (tests/celery_probe.py) consuming from Redis db 11."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROOFPOOL_")}
    env.update(PROOFPOOL_BROKER_URL=indexer_redis_url, PROBE_REDIS_URL=indexer_redis_url)
    log = open(tmp_path / "worker.log", "ab")  # noqa: SIM115 - handed to the child
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "tests.celery_probe",
            "worker",
            "--pool=solo",
            "--concurrency=1",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "--loglevel=WARNING",
        ],
        cwd=REPO_ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    probe = Probe(process, redis.Redis.from_url(indexer_redis_url), indexer_redis_url)
    try:
        probe.sync()
        yield probe
    finally:
        stop(process)
        log.close()


def dispatcher_for(probe: Probe, wrap: Callable | None = None) -> Dispatcher:
    sender = CelerySender(make_celery(Settings(broker_url=probe.broker_url), "test-dispatch"))
    return Dispatcher(wrap(sender) if wrap else sender, batch=8)


def expected_deliveries(url: str) -> dict[str, tuple[int, str]]:
    """task id -> (pool id, work key) for every indexed submission."""
    return {task_id_for(f"{pool}:{key}"): (pool, key) for pool, key in submitted_keys(url)}


def test_a_kill_between_commit_and_dispatch_still_sends_each_task_exactly_once(fresh_anvil, clean_database, probe):
    world = build_bulk_world(fresh_anvil, 40)
    # the indexer commits the outbox rows and "dies" before sending any (no dispatcher)
    make_indexer(world.market.w3, world.book, clean_database, batch_blocks=3).run(once=True)
    assert query(clean_database, "SELECT count(*) FROM outbox WHERE dispatched_at IS NULL") == [(40,)]
    probe.sync()
    assert probe.received() == []  # nothing is sent before the rows commit and a dispatcher runs

    stats = make_indexer(world.market.w3, world.book, clean_database, dispatcher_for(probe)).run(once=True)
    probe.sync()

    received = probe.received()
    assert stats.tasks_sent == 40 and len(received) == 40
    assert {r["task_id"]: (r["pool_id"], r["work_key"]) for r in received} == expected_deliveries(clean_database)
    assert query(clean_database, "SELECT count(*) FROM outbox WHERE dispatched_at IS NULL") == [(0,)]
    # a later run sends nothing again
    make_indexer(world.market.w3, world.book, clean_database, dispatcher_for(probe)).run(once=True)
    probe.sync()
    assert len(probe.received()) == 40


class Killed(BaseException):
    """Stands for the process dying: not an Exception, so nothing on the way catches it."""


def test_a_kill_between_send_and_mark_resends_with_the_same_task_id(fresh_anvil, clean_database, probe):
    world = build_bulk_world(fresh_anvil, 20)
    make_indexer(world.market.w3, world.book, clean_database).run(once=True)

    def dies_after_three(sender: CelerySender):
        class Dying:
            @contextmanager
            def session(self):
                with sender.session() as send:
                    sent = 0

                    def send_then_die(row):
                        nonlocal sent
                        send(row)
                        sent += 1
                        if sent == 3:
                            raise Killed

                    yield send_then_die

        return Dying()

    with psycopg.connect(clean_database, autocommit=True) as conn, pytest.raises(Killed):
        dispatcher_for(probe, dies_after_three).dispatch_pending(conn)
    assert query(clean_database, "SELECT count(*) FROM outbox WHERE dispatched_at IS NULL") == [(20,)]

    with psycopg.connect(clean_database, autocommit=True) as conn:
        assert dispatcher_for(probe).dispatch_pending(conn) == 20
    probe.sync()

    received = probe.received()
    assert len(received) == 23  # the three sent before the "death" were sent again...
    by_id: dict[str, set] = {}
    for r in received:
        by_id.setdefault(r["task_id"], set()).add((r["pool_id"], r["work_key"]))
    # ...under the same task ids: one id per submission, so the consumer dedupes them exactly
    assert {k: v.pop() for k, v in by_id.items()} == expected_deliveries(clean_database)
    assert sorted(len([r for r in received if r["task_id"] == t]) for t in by_id)[-3:] == [2, 2, 2]


def test_sigkill_of_a_dispatching_indexer_loses_no_task(fresh_anvil, clean_database, probe, tmp_path):
    world = build_bulk_world(fresh_anvil, 120, per_block=4)
    env = indexer_env(
        clean_database, fresh_anvil, world.book, tmp_path / "deployments", PROOFPOOL_BROKER_URL=probe.broker_url
    )
    log_path = tmp_path / "indexer.log"
    child = spawn_indexer(env, "--batch-blocks", "2", log_path=log_path)
    try:
        wait_for(lambda: query(clean_database, "SELECT count(*) FROM outbox")[0][0] > 8, "committed submissions")
        with blocks_locked(clean_database):
            wait_for(lambda: indexer_backends(clean_database, True), "the indexer inside a range")
            # meanwhile its dispatcher thread sends what was committed before: kill it with both at work
            wait_for(lambda: query(clean_database, PENDING_TASKS) == [(0,)], "the committed tasks to be sent")
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=10)
        wait_for(lambda: not indexer_backends(clean_database), "the killed session to end")
    finally:
        if child.poll() is None:
            child.kill()
    sent_before_kill = query(clean_database, "SELECT count(*) FROM outbox WHERE dispatched_at IS NOT NULL")[0][0]
    assert 0 < sent_before_kill < 120
    assert_consistent_cut(clean_database)

    restarted = spawn_indexer(env, "--once", "--batch-blocks", "5", log_path=log_path)
    assert restarted.wait(timeout=120) == 0, log_path.read_text()[-2000:]
    probe.sync()

    received = probe.received()
    expected = expected_deliveries(clean_database)
    assert len(expected) == 120
    assert {r["task_id"]: (r["pool_id"], r["work_key"]) for r in received} == expected  # none lost, ids fixed
    assert len(received) >= len(expected)  # more only for rows sent but not yet marked at the kill
    assert query(clean_database, "SELECT count(*) FROM outbox WHERE dispatched_at IS NULL") == [(0,)]


def test_a_validation_task_the_broker_lost_is_sent_again_once_its_redispatch_time_passed(
    fresh_anvil, clean_database, probe
):
    world = build_bulk_world(fresh_anvil, 6)
    dispatcher = Dispatcher(
        CelerySender(make_celery(Settings(broker_url=probe.broker_url), "test-dispatch")), batch=8, redispatch_after=300
    )
    make_indexer(world.market.w3, world.book, clean_database, dispatcher).run(once=True)
    probe.sync()
    first = probe.received()
    assert len(first) == 6
    keys = sorted(submitted_keys(clean_database))

    # Nothing is sent again before its time, whatever its state.
    with psycopg.connect(clean_database, autocommit=True) as conn:
        conn.execute("UPDATE submissions SET status = 'pending'")
        assert dispatcher.requeue_lost(conn) == 0
        # The broker "lost" every task 400 s ago; validators took up some of them since. (The world's
        # submissions were attested on-chain: the ledger is set back to pending, as if not yet judged.)
        conn.execute("UPDATE outbox SET dispatched_at = now() - interval '400 seconds'")
        conn.execute("UPDATE submissions SET status = 'pending'")
        held = [
            (keys[0], "sent", "now() - interval '1 hour'"),  # judged and recorded
            (keys[1], "claimed", "now() + interval '1 minute'"),  # being judged now
            (keys[2], "claimed", "now() - interval '1 minute'"),  # its validator died: lease ran out
        ]
        for (pool, key), state, lease in held:
            decided = "now(), 'accepted', now()" if state == "sent" else "NULL, NULL, NULL"
            conn.execute(
                "INSERT INTO validations (pool_id, work_key, validator, state, lease_until, decided_at, verdict,"
                f" sent_at) VALUES (%s, %s, '0x0000000000000000000000000000000000000001', %s, {lease}, {decided})",
                (pool, bytes.fromhex(key[2:]), state),
            )
        pool, key = keys[3]
        conn.execute(
            "UPDATE submissions SET status = 'accepted' WHERE pool_id = %s AND work_key = %s",
            (pool, bytes.fromhex(key[2:])),
        )  # judged on-chain already
        assert dispatcher.requeue_lost(conn) == 3  # keys[2], keys[4], keys[5]
        assert dispatcher.dispatch_pending(conn) == 3
        assert dispatcher.requeue_lost(conn) == 0  # sent again just now: not before another 300 s

    probe.sync()
    again = probe.received()[len(first) :]
    assert sorted((r["pool_id"], r["work_key"]) for r in again) == [keys[2], keys[4], keys[5]]
    assert all(r["task_id"] == task_id_for(f"{r['pool_id']}:{r['work_key']}") for r in again)  # the same ids

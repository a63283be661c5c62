"""The ledger statistics (`pool_stats`, `contributors`, `validator_stats`, migration 0012) on a real
PostgreSQL: after any sequence of inserts, updates, deletes and truncates of submissions, verdicts,
slashes and rewards, in transactions of any size, each table equals the same figures recomputed
from the source rows by plain queries written here (not the migration's). Also: the backfill of
rows written before the triggers existed, and the real indexer's rows through a reorg rollback."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from eth_utils import to_checksum_address
from proofpool.backend.indexer.reorg import roll_back

from proofpool.core.ledger_listings import POOL_STATS, REWARDS, STATISTICS, SUBMISSIONS, Listing
from proofpool.infra import db
from tests.fixtures.indexer import make_indexer, query
from tests.fixtures.postgres import migrated_database, truncate_all

STATUSES = SUBMISSIONS.column("status").values
KINDS = REWARDS.column("kind").values
ACCEPTED = "('accepted', 'finalized')"

# The figures each statistics table must hold, from the source rows alone, in its listing's
# column order and key order. Correlated subqueries per key: slow, but plainly the definition.
_POOL_COUNT = "(SELECT count(*) FROM submissions s WHERE s.pool_id = p.pool_id{})"
EXPECTED: dict[str, str] = {
    "pool_stats": f"""
        SELECT p.pool_id, {_POOL_COUNT.format("")},
               (SELECT COALESCE(sum(COALESCE(cardinality(s.file_keys), 1)), 0) FROM submissions s
                 WHERE s.pool_id = p.pool_id),
               {", ".join(_POOL_COUNT.format(f" AND s.status = '{status}'") for status in STATUSES)},
               (SELECT COALESCE(sum(s.work_units), 0) FROM submissions s
                 WHERE s.pool_id = p.pool_id AND s.status IN {ACCEPTED}),
               (SELECT COALESCE(sum(x.amount), 0) FROM slashes x WHERE x.pool_id = p.pool_id),
               (SELECT COALESCE(sum(r.amount), 0) FROM rewards r WHERE r.pool_id = p.pool_id
                   AND r.kind = 'provider_reward'),
               (SELECT COALESCE(sum(r.amount), 0) FROM rewards r WHERE r.pool_id = p.pool_id
                   AND r.kind = 'validator_fee')
          FROM (SELECT pool_id FROM submissions UNION SELECT pool_id FROM slashes
                UNION SELECT pool_id FROM rewards WHERE pool_id IS NOT NULL AND kind <> 'withdrawal') AS p
         ORDER BY p.pool_id""",
    "contributors": f"""
        SELECT c.pool_id, c.node,
               (SELECT s.provider FROM submissions s WHERE s.pool_id = c.pool_id AND s.node = c.node
                 ORDER BY s.block_number DESC, s.log_index DESC LIMIT 1),
               count(*), sum(COALESCE(cardinality(c.file_keys), 1)),
               count(*) FILTER (WHERE c.status = 'pending'),
               count(*) FILTER (WHERE c.status IN {ACCEPTED}),
               count(*) FILTER (WHERE c.status = 'invalid'),
               COALESCE(sum(c.work_units) FILTER (WHERE c.status IN {ACCEPTED}), 0),
               COALESCE(sum((SELECT sum(r.amount) FROM rewards r WHERE r.pool_id = c.pool_id
                   AND r.work_key = c.work_key AND r.kind = 'provider_reward')), 0),
               COALESCE(sum((SELECT sum(x.amount) FROM slashes x WHERE x.pool_id = c.pool_id
                   AND x.work_key = c.work_key)), 0)
          FROM submissions c
         GROUP BY c.pool_id, c.node
         ORDER BY c.pool_id, c.node""",
    "validator_stats": """
        SELECT v.validator,
               (SELECT count(*) FROM verdicts d WHERE d.validator = v.validator AND d.verdict = 'accepted'),
               (SELECT count(*) FROM verdicts d WHERE d.validator = v.validator AND d.verdict = 'invalid'),
               (SELECT COALESCE(sum(r.amount), 0) FROM rewards r WHERE r.account = v.validator
                   AND r.kind = 'validator_fee'),
               (SELECT COALESCE(sum(r.amount), 0) FROM rewards r WHERE r.account = v.validator
                   AND r.kind = 'slash_share')
          FROM (SELECT validator FROM verdicts
                UNION SELECT account FROM rewards WHERE kind IN ('validator_fee', 'slash_share')) AS v
         ORDER BY v.validator""",
}


def stored(conn: psycopg.Connection, listing: Listing) -> list[tuple]:
    """The statistics table's rows, its listing's columns, in key order."""
    columns = ", ".join(column.name for column in listing.columns)
    return conn.execute(f"SELECT {columns} FROM {listing.name} ORDER BY {', '.join(listing.key)}").fetchall()


def assert_exact(conn: psycopg.Connection) -> dict[str, list[tuple]]:
    """Every statistics table equals its recomputation (read outside any open transaction of the
    writer); returns the tables' rows."""
    out = {}
    for listing in STATISTICS:
        rows = stored(conn, listing)
        assert rows == conn.execute(EXPECTED[listing.name]).fetchall(), listing.name
        out[listing.name] = rows
    assert query_count(conn, "ledger_stats_deltas", "ledger_stats_fold_requests") == 0
    return out


def query_count(conn: psycopg.Connection, *tables: str) -> int:
    return sum(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] for table in tables)


@pytest.fixture(scope="module")
def stats_url() -> Iterator[str]:
    """A database of this module's own at head."""
    with migrated_database("proofpool_test_stats") as url:
        yield url


@pytest.fixture
def stats_db(stats_url: str) -> str:
    truncate_all(stats_url)
    return stats_url


def _address(rng: random.Random) -> str:
    return to_checksum_address(rng.randbytes(20).hex())


class RandomLedger:
    """Random writes to the four source tables as SQL, the way no indexer would order them:
    credits and slashes before (or without) their submission, status changes back and forth,
    submissions moved to another node, key or position, rows deleted and tables truncated."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.nodes = [_address(rng) for _ in range(5)]
        self.providers = [_address(rng) for _ in range(3)]
        self.validators = [_address(rng) for _ in range(3)]
        self.owner = {node: rng.choice(self.providers) for node in self.nodes}
        self.positions: set[tuple[int, int]] = set()
        self.orphans: list[tuple[int, bytes]] = []
        """Keys given credits, slashes or verdicts without a submission (one may arrive later)."""

    def position(self) -> tuple[int, int]:
        """A chain position no submission holds (positions of logs are unique on a chain)."""
        while True:
            at = (self.rng.randrange(1, 100_000), self.rng.randrange(0, 8))
            if at not in self.positions:
                self.positions.add(at)
                return at

    def amount(self) -> int:
        return self.rng.choice((0, 1, self.rng.randrange(10**18), self.rng.randrange(10**30)))

    def files(self) -> tuple[list[bytes] | None, list[int] | None, int]:
        if self.rng.random() < 0.3:
            units = [self.rng.randrange(1, 1000) for _ in range(self.rng.randrange(1, 6))]
            return [self.rng.randbytes(32) for _ in units], units, sum(units)
        return None, None, self.rng.choice((1, self.rng.randrange(1, 10**6), 2**40))

    def pick(self, conn: psycopg.Connection, table: str, columns: str = "id") -> Any:
        """A random row's `columns` (drawn by this ledger's seed), None when the table is empty."""
        rows = conn.execute(f"SELECT {columns} FROM {table} ORDER BY {columns}").fetchall()
        return self.rng.choice(rows) if rows else None

    def submission(self, conn: psycopg.Connection) -> tuple[int, bytes] | None:
        """An existing submission's (pool_id, work_key)."""
        return self.pick(conn, "submissions", "pool_id, work_key")

    def key(self, conn: psycopg.Connection) -> tuple[int, bytes]:
        """A submission's (pool_id, work_key): mostly one that exists, else an orphan or a new one."""
        roll = self.rng.random()
        if roll < 0.75 and (existing := self.submission(conn)) is not None:
            return tuple(existing)
        if roll < 0.9 and self.orphans:
            return self.rng.choice(self.orphans)
        key = (self.rng.randint(1, 3), self.rng.randbytes(32))
        self.orphans.append(key)
        return key

    def step(self, conn: psycopg.Connection) -> None:
        """One random write."""
        op = self.rng.choices(
            [self.submit, self.restatus, self.move, self.unsubmit, self.verdict, self.slash, self.credit,
             self.change, self.remove],
            weights=[25, 25, 6, 5, 10, 8, 12, 5, 5],
        )[0]  # fmt: skip
        op(conn)

    def submit(self, conn: psycopg.Connection) -> None:
        taken = {tuple(r) for r in conn.execute("SELECT pool_id, work_key FROM submissions")}
        free = [k for k in self.orphans if k not in taken]
        pool_id, work_key = (
            self.rng.choice(free)
            if free and self.rng.random() < 0.3
            else (self.rng.randint(1, 3), self.rng.randbytes(32))
        )
        node = self.rng.choice(self.nodes)
        provider = self.owner[node] if self.rng.random() < 0.85 else self.rng.choice(self.providers)
        file_keys, file_units, units = self.files()
        block, log = self.position()
        conn.execute(
            "INSERT INTO submissions (pool_id, work_key, node, provider, work_units, model_version, status,"
            " submitted_at, block_number, tx_hash, log_index, file_keys, file_units)"
            " VALUES (%s, %s, %s, %s, %s, 1, %s, now(), %s, %s, %s, %s::bytea[], %s::bigint[])",
            (pool_id, work_key, node, provider, units, self.rng.choice(STATUSES), block, self.rng.randbytes(32), log,
             file_keys, file_units),
        )  # fmt: skip

    def restatus(self, conn: psycopg.Connection) -> None:
        # Sometimes to the status it has: the update trigger's WHEN skips it.
        self._update(conn, "status = %s, status_block = %s", self.rng.choice(STATUSES), self.rng.randrange(10**6))

    def _update(self, conn: psycopg.Connection, assignments: str, *values: Any) -> None:
        """`UPDATE submissions SET <assignments>` of one random submission."""
        if (key := self.submission(conn)) is not None:
            conn.execute(f"UPDATE submissions SET {assignments} WHERE pool_id = %s AND work_key = %s", (*values, *key))

    def move(self, conn: psycopg.Connection) -> None:
        """Change what a submission is: its node, provider, key, pool, position, units or files."""
        what = self.rng.choice(("node", "provider", "work_key", "pool_id", "position", "units", "files"))
        if what == "node":
            self._update(conn, "node = %s", self.rng.choice(self.nodes))
        elif what == "provider":
            self._update(conn, "provider = %s", self.rng.choice(self.providers))
        elif what in ("work_key", "pool_id"):  # to an orphan's key (taking its credits) or a new one
            pool_id, work_key = self.rng.choice([*self.orphans, (self.rng.randint(1, 3), self.rng.randbytes(32))])
            free = " AND NOT EXISTS (SELECT 1 FROM submissions s WHERE s.pool_id = %s AND s.work_key = %s)"
            if (key := self.submission(conn)) is not None:
                conn.execute(
                    f"UPDATE submissions SET pool_id = %s, work_key = %s WHERE pool_id = %s AND work_key = %s{free}",
                    (pool_id, work_key if what == "work_key" else key[1], *key, pool_id, work_key),
                )
        elif what == "position":
            self._update(conn, "block_number = %s, log_index = %s", *self.position())
        elif what == "units":
            self._update(conn, "work_units = %s", self.rng.randrange(10**6))
        else:
            file_keys, file_units, units = self.files()
            self._update(conn, "file_keys = %s::bytea[], file_units = %s::bigint[], work_units = %s", file_keys,
                         file_units, units)  # fmt: skip

    def unsubmit(self, conn: psycopg.Connection) -> None:
        if (key := self.submission(conn)) is not None:
            conn.execute("DELETE FROM submissions WHERE pool_id = %s AND work_key = %s", key)

    def verdict(self, conn: psycopg.Connection) -> None:
        pool_id, work_key = self.key(conn)
        conn.execute(
            "INSERT INTO verdicts (pool_id, work_key, verdict, validator, reason, block_number, tx_hash, log_index)"
            " VALUES (%s, %s, %s, %s, NULL, %s, %s, 0)",
            (pool_id, work_key, self.rng.choice(("accepted", "invalid")), self.rng.choice(self.validators),
             self.rng.randrange(10**6), self.rng.randbytes(32)),
        )  # fmt: skip

    def slash(self, conn: psycopg.Connection) -> None:
        pool_id, work_key = self.key(conn)
        share, rest = self.amount(), self.amount()
        conn.execute(
            "INSERT INTO slashes (pool_id, work_key, provider, validator, validator_share, treasury, treasury_share,"
            " amount, block_number, tx_hash, log_index) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, 1)",
            (pool_id, work_key, self.rng.choice(self.providers), self.rng.choice(self.validators), share,
             self.providers[0], rest, share + rest, self.rng.randrange(10**6), self.rng.randbytes(32)),
        )  # fmt: skip

    def credit(self, conn: psycopg.Connection) -> None:
        kind = self.rng.choice(KINDS)
        pool_id, work_key = (None, None) if kind == "withdrawal" else self.key(conn)
        account = self.rng.choice(self.validators if kind in ("validator_fee", "slash_share") else self.providers)
        conn.execute(
            "INSERT INTO rewards (account, pool_id, work_key, kind, amount, block_number, tx_hash, log_index)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, 0)",
            (account, pool_id, work_key, kind, self.amount(), self.rng.randrange(10**6), self.rng.randbytes(32)),
        )

    def change(self, conn: psycopg.Connection) -> None:
        """Rewrite a verdict, slash or credit (another validator, verdict, amount, kind, account or key)."""
        table = self.rng.choice(("verdicts", "slashes", "rewards"))
        row_id = self.pick(conn, table)
        if row_id is None:
            return
        row_id = row_id[0]
        if table == "verdicts":
            conn.execute(
                "UPDATE verdicts SET verdict = %s, validator = %s WHERE id = %s",
                (self.rng.choice(("accepted", "invalid")), self.rng.choice(self.validators), row_id),
            )
        elif table == "slashes":
            pool_id, work_key = self.key(conn)
            conn.execute(
                "UPDATE slashes SET amount = %s, pool_id = %s, work_key = %s WHERE id = %s",
                (self.amount(), pool_id, work_key, row_id),
            )
        else:
            kind = self.rng.choice(KINDS[:3])
            pool_id, work_key = self.key(conn)
            conn.execute(
                "UPDATE rewards SET kind = %s, amount = %s, account = %s, pool_id = %s, work_key = %s WHERE id = %s",
                (kind, self.amount(), self.rng.choice(self.validators + self.providers), pool_id, work_key, row_id),
            )

    def remove(self, conn: psycopg.Connection) -> None:
        table = self.rng.choice(("verdicts", "slashes", "rewards"))
        if (row := self.pick(conn, table)) is not None:
            conn.execute(f"DELETE FROM {table} WHERE id = %s", row)


def _transaction(conn: psycopg.Connection, ledger: RandomLedger, rng: random.Random) -> None:
    """A random number of writes in one transaction, some in a savepoint rolled back, sometimes
    folding after every statement, sometimes a TRUNCATE (the projections' rebuild) among them."""
    with conn.transaction():
        if rng.random() < 0.1:
            conn.execute("SET CONSTRAINTS ALL IMMEDIATE")
        for _ in range(rng.randrange(1, 30)):
            if rng.random() < 0.05:
                with conn.transaction(force_rollback=True):
                    for _ in range(rng.randrange(1, 5)):
                        ledger.step(conn)
            elif rng.random() < 0.01:
                conn.execute(f"TRUNCATE {rng.choice(('submissions', 'verdicts', 'slashes', 'rewards'))}")
            else:
                ledger.step(conn)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_writes_in_any_order_keep_every_statistic_exact(stats_db, seed):
    rng = random.Random(seed)
    ledger = RandomLedger(rng)
    with psycopg.connect(stats_db, autocommit=True) as conn, psycopg.connect(stats_db, autocommit=True) as reader:
        for _ in range(120):
            _transaction(conn, ledger, rng)
            assert_exact(reader)
        counts = {listing.name: len(stored(reader, listing)) for listing in STATISTICS}
    assert all(counts.values()), counts  # the walk ends with something to count


def test_a_transaction_sees_the_statistics_as_committed_before_it_until_it_commits(stats_db):
    with psycopg.connect(stats_db, autocommit=True) as conn, psycopg.connect(stats_db, autocommit=True) as reader:
        ledger = RandomLedger(random.Random(5))
        with conn.transaction():
            for _ in range(20):
                ledger.submit(conn)
            assert stored(conn, POOL_STATS) == stored(reader, POOL_STATS) == []
            assert query_count(conn, "ledger_stats_deltas") == 20
        assert sum(row[1] for row in assert_exact(reader)["pool_stats"]) == 20
        assert query_count(reader, "ledger_stats_fold_requests") == 0


def test_concurrent_writers_each_fold_their_own_deltas(stats_db):
    def write(seed: int) -> None:
        ledger = RandomLedger(random.Random(seed))
        with psycopg.connect(stats_db, autocommit=True) as conn:
            for _ in range(40):
                with conn.transaction():
                    for _ in range(5):
                        ledger.submit(conn)
                        ledger.credit(conn)

    threads = [threading.Thread(target=write, args=(seed,)) for seed in (11, 12, 13)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    with psycopg.connect(stats_db, autocommit=True) as reader:
        assert sum(row[1] for row in assert_exact(reader)["pool_stats"]) == 3 * 40 * 5


def test_rows_written_before_the_triggers_existed_are_counted_by_the_upgrade():
    with migrated_database("proofpool_test_stats_backfill") as url:
        db.downgrade(url, "0011")
        ledger, rng = RandomLedger(random.Random(9)), random.Random(9)
        with psycopg.connect(url, autocommit=True) as conn:
            for _ in range(300):
                ledger.step(conn)
            assert conn.execute("SELECT to_regclass('pool_stats')").fetchone() == (None,)
        db.upgrade(url)
        with psycopg.connect(url, autocommit=True) as conn:
            before = assert_exact(conn)
            assert all(before.values())
            for _ in range(20):  # and the triggers take over from there
                _transaction(conn, ledger, rng)
            assert_exact(conn)

        db.downgrade(url, "0011")
        with psycopg.connect(url, autocommit=True) as conn:
            left = conn.execute(
                "SELECT proname FROM pg_proc WHERE proname LIKE 'ledger_stats%' UNION ALL "
                "SELECT tgname FROM pg_trigger WHERE tgname LIKE 'ledger_stats%' UNION ALL "
                "SELECT relname FROM pg_class WHERE relnamespace = 'public'::regnamespace AND (relname LIKE '%stats%'"
                " OR relname LIKE 'contributors%' OR relname IN ('rewards_work_key', 'slashes_work_key'))"
            ).fetchall()
        assert left == []


@pytest.mark.timeout(300)
def test_the_indexer_keeps_them_exact_through_a_reorg_rollback_and_reindexing(loop_world, clean_database):
    """The chain loop indexed in small ranges (many transactions), rolled back to the middle of its
    work by the indexer's reorg path (validator state cleanup, events deleted, projections
    truncated and replayed), then indexed again: exact at every step, and the same at the end."""
    make_indexer(loop_world.w3, loop_world.book, clean_database, batch_blocks=2).run(once=True)
    with psycopg.connect(clean_database, autocommit=True) as conn:
        full = assert_exact(conn)
    loop, cast = loop_world.loop, loop_world.cast
    pools = {row[0]: row for row in full["pool_stats"]}
    names = [column.name for column in POOL_STATS.columns]
    work = dict(zip(names, pools[loop.pool_id], strict=True))
    assert (work["submissions"], work["finalized"], work["invalid"]) == (2, 1, 1)
    assert work["slashed"] > 0 and work["rewards_paid"] > 0 and work["validator_fees"] > 0
    contributors = {(row[1], row[2]): row for row in full["contributors"]}
    honest, cheater = (cast.alice_node.address, cast.alice.address), (cast.bob_node.address, cast.bob.address)
    assert set(contributors) == {honest, cheater}
    assert contributors[cheater][-1] == work["slashed"] and contributors[honest][-2] == work["rewards_paid"]
    validators = {row[0]: row for row in full["validator_stats"]}
    assert validators[cast.validator.address][1:3] == (1, 1)

    (fork,) = query(
        clean_database, "SELECT min(block_number) FROM chain_events WHERE name IN ('WorkFinalized', 'SlashDistributed')"
    )[0]
    with psycopg.connect(clean_database) as conn, conn.transaction():
        rollback = roll_back(conn, fork)
    assert rollback.events_removed > 0
    with psycopg.connect(clean_database, autocommit=True) as conn:
        assert assert_exact(conn) != full

    make_indexer(loop_world.w3, loop_world.book, clean_database, batch_blocks=3).run(once=True)
    with psycopg.connect(clean_database, autocommit=True) as conn:
        assert assert_exact(conn) == full

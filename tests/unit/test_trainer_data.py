"""The trainer's rollout source takes what a step needs, freshest model versions first.

Ledger and store are faked here (`tests/fixtures/trainer_source.py`): what is under test is the
choice of files, not the services (tests/integration/test_trainer_run.py runs them for real).
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from proofpool.trainer.data import RolloutSource

from proofpool.core.rollout import RolloutFileMeta, rollouts_bytes
from proofpool.infra.storage import JudgedRow, judged_document, judged_key, rollout_key
from tests.fixtures.trainer_source import NODE, POOL, FakeLedger, FakeStore, rollout_rows


def _market(files: list[tuple[int, int, str]]) -> tuple[RolloutSource, list[bytes]]:
    """Files as (model version, block, status); the source and the files' work keys (their sha256)."""
    rows, objects, keys = [], {}, []
    for i, (version, block, status) in enumerate(files):
        data = rollouts_bytes(RolloutFileMeta(POOL, NODE), rollout_rows(version, seed=i))
        key = hashlib.sha256(data).digest()
        keys.append(key)
        rows.append(
            {
                "work_key": "0x" + key.hex(),
                "model_version": version,
                "block_number": block,
                "status": status,
                "node": NODE,
            }
        )
        objects[rollout_key(POOL, NODE, key.hex())] = data
    return RolloutSource(FakeLedger(rows), FakeStore(objects), POOL), keys  # type: ignore[arg-type]


def test_takes_the_newest_versions_first_and_stops_when_it_has_enough() -> None:
    source, keys = _market([(0, 10, "accepted"), (2, 30, "accepted"), (1, 20, "finalized"), (2, 25, "accepted")])
    first = source.fetch_new(min_version=0, rows_wanted=8)
    assert [rows[0].model_version for _, rows in first] == [2, 2]
    assert [key for key, _ in first] == [keys[3], keys[1]]  # same version: the earlier block first
    rest = source.fetch_new(min_version=0, rows_wanted=8)
    assert [rows[0].model_version for _, rows in rest] == [1, 0]  # what was left, never a file twice


def test_leaves_versions_below_the_window_and_pending_work_alone() -> None:
    source, keys = _market([(0, 10, "accepted"), (1, 20, "pending"), (1, 21, "invalid"), (1, 22, "accepted")])
    found = source.fetch_new(min_version=1)
    assert [key for key, _ in found] == [keys[3]]
    assert source.fetch_new(min_version=0) != []  # the version-0 file was not marked used


def test_gather_rides_out_a_backend_that_is_down_for_a_while() -> None:
    """The e2e drill kills the backend while the trainer waits: the trainer must ask again."""
    import threading

    from proofpool.trainer.data import gather

    from proofpool.core.errors import ServiceUnavailable

    source, _ = _market([(0, 10, "accepted"), (0, 11, "accepted")])
    ledger = source.ledger
    outages = [2]
    real_items = ledger.items

    def flaky(resource: str, filters: dict[str, Any]) -> list[dict[str, Any]]:
        if outages[0]:
            outages[0] -= 1
            raise ServiceUnavailable("backend not reachable (restarting)")
        return real_items(resource, filters)

    ledger.items = flaky  # type: ignore[method-assign]
    rows = gather(source, step=0, async_level=2, samples=8, timeout=10, stop=threading.Event(), say=print, poll=0.01)
    assert len(rows) == 8 and outages == [0]


def test_a_pool_without_reproducible_scores_trains_on_the_validators_judgements_once_they_are_stored(
    caplog: Any,
) -> None:
    """Code pools: a file whose judgements are not stored yet is left for later, not used up."""
    source, keys = _market([(0, 10, "accepted")])
    source.judged = True
    assert source.fetch_new(min_version=0) == []
    assert source.fetch_new(min_version=0) == []  # asked again, warned once
    assert keys[0] not in source.seen and keys[0] not in source.poisoned
    assert [r.message for r in caplog.records].count(
        "accepted file skipped until its validator's judgements are stored"
    ) == 1
    judged = [JudgedRow("add-1-2", 0, reward, status) for reward, status in JUDGEMENTS]
    store = source.store
    store.objects[judged_key(POOL, NODE, keys[0].hex())] = judged_document(keys[0].hex(), NODE, judged)  # type: ignore[attr-defined]
    ((key, rows),) = source.fetch_new(min_version=0)
    assert key == keys[0] and keys[0] in source.seen
    assert [r.reward for r in rows] == [1.0, 0.0, 1.0]  # the file claimed 0.0 each; one row inconclusive
    assert [r.advantage for r in rows] == pytest.approx([1 / 3, -2 / 3, 1 / 3])


JUDGEMENTS = [(1.0, "correct"), (0.0, "inconclusive"), (0.0, "timeout"), (1.0, "correct")]


def test_judgements_that_do_not_fit_the_file_poison_it() -> None:
    source, keys = _market([(0, 10, "accepted")])
    source.judged = True
    short = [JudgedRow("add-1-2", 0, 1.0, "correct")]
    store = source.store
    store.objects[judged_key(POOL, NODE, keys[0].hex())] = judged_document(keys[0].hex(), NODE, short)  # type: ignore[attr-defined]
    assert source.fetch_new(min_version=0) == []
    assert "bad_judgements: group 0 has more rows than judgements (1)" in source.poisoned.reasons["0x" + keys[0].hex()]
    assert source.fetch_new(min_version=0) == []  # never fetched again


def test_a_pool_with_reproducible_scores_trains_on_the_files_rewards() -> None:
    source, keys = _market([(0, 10, "accepted")])
    judged = [JudgedRow("add-1-2", 0, 1.0, "correct")] * 4
    store = source.store
    store.objects[judged_key(POOL, NODE, keys[0].hex())] = judged_document(keys[0].hex(), NODE, judged)  # type: ignore[attr-defined]
    ((_, rows),) = source.fetch_new(min_version=0)
    assert [r.reward for r in rows] == [0.0] * 4

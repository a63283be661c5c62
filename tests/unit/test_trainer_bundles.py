"""The trainer reads a bundle (many files, one submission) as its files: each fetched from its own
rollout key, screened against its own sha256, used once and poisoned alone.

Ledger and store are faked (`tests/fixtures/trainer_source.py`), as in tests/unit/test_trainer_data.py:
what is under test is how ledger rows become files.
"""

from __future__ import annotations

import hashlib

from proofpool.trainer.data import RolloutSource, _work_key, expand_files

from proofpool.core.rollout import RolloutFileMeta, rollouts_bytes
from proofpool.infra.chain.bundles import bundle_key, canonical
from proofpool.infra.storage import rollout_key
from tests.fixtures.trainer_source import NODE, POOL, FakeLedger, FakeStore, rollout_rows


def bundle_market(seeds: list[int], broken: int | None = None) -> tuple[RolloutSource, FakeStore, list[bytes]]:
    """One accepted bundle of files made with `seeds` (file `broken` stored with other bytes than its
    key says), next to one accepted single-file submission; the source, the store, the bundle's
    file keys in bundle (canonical) order."""
    objects: dict[str, bytes] = {}
    files = []
    for seed in seeds:
        data = rollouts_bytes(RolloutFileMeta(POOL, NODE), rollout_rows(1, seed=seed))
        key = hashlib.sha256(data).digest()
        files.append((key, 8))
        objects[rollout_key(POOL, NODE, key.hex())] = data
    keys, units = canonical(files)
    if broken is not None:
        objects[rollout_key(POOL, NODE, keys[broken].hex())] = b"not the file the chain recorded"
    single = rollouts_bytes(RolloutFileMeta(POOL, NODE), rollout_rows(1, seed=99))
    single_key = hashlib.sha256(single).digest()
    objects[rollout_key(POOL, NODE, single_key.hex())] = single
    common = {"model_version": 1, "status": "accepted", "node": NODE}
    ledger_rows = [
        {
            **common,
            "work_key": "0x" + bundle_key(keys, units).hex(),
            "work_units": sum(units),
            "block_number": 10,
            "files": [{"work_key": "0x" + k.hex(), "work_units": u} for k, u in zip(keys, units, strict=True)],
        },
        {**common, "work_key": "0x" + single_key.hex(), "work_units": 8, "block_number": 11, "files": None},
    ]
    store = FakeStore(objects)
    return RolloutSource(FakeLedger(ledger_rows), store, POOL), store, [*keys, single_key]  # type: ignore[arg-type]


def test_a_bundle_row_expands_to_its_files_in_order() -> None:
    row = {
        "work_key": "0xbb",
        "work_units": 5,
        "files": [{"work_key": "0x01", "work_units": 2}, {"work_key": "0x02", "work_units": 3}],
        "status": "accepted",
    }
    expanded = expand_files(row)
    assert [(r["work_key"], r["work_units"], r["bundle_key"], r["status"]) for r in expanded] == [
        ("0x01", 2, "0xbb", "accepted"),
        ("0x02", 3, "0xbb", "accepted"),
    ]
    assert [_work_key(r) for r in expanded] == [b"\x01", b"\x02"]
    single = {"work_key": "0xaa", "files": None}
    assert expand_files(single) == [single] and expand_files({"work_key": "0xaa"}) == [{"work_key": "0xaa"}]


def test_each_file_of_a_bundle_is_fetched_from_its_own_key_and_used_once() -> None:
    source, store, keys = bundle_market([1, 2, 3])
    found = source.fetch_new(min_version=0)
    assert [key for key, _ in found] == keys  # the bundle's files in its order, then the single file
    assert all(len(rows) == 4 for _, rows in found)
    assert store.read == [rollout_key(POOL, NODE, k.hex()) for k in keys]
    assert source.seen == set(keys)
    assert source.fetch_new(min_version=0) == []  # never a file twice


def test_a_bad_file_in_an_accepted_bundle_is_poisoned_alone() -> None:
    source, _, keys = bundle_market([1, 2, 3], broken=1)
    found = source.fetch_new(min_version=0)
    assert [key for key, _ in found] == [keys[0], keys[2], keys[3]]
    assert keys[1] in source.poisoned and keys[0] not in source.poisoned

"""The trainer does not trust "accepted": each fetched file is hashed, parsed and its rows bounded
before any reaches the model, and a refused file is remembered across restarts.

Ledger and store are faked (a list of submission rows, a dict of objects); the model is a tiny
seeded Llama with the devnet vocabulary (16 ids) and positions (64).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from proofpool.trainer.config import GrpoConfig
from proofpool.trainer.data import RolloutSource, gather
from proofpool.trainer.screen import POISON_FILE, ModelLimits, PoisonList, Screened, Submission, screen_file
from proofpool.trainer.state import TrainerState, load_state, save_state
from proofpool.trainer.step import grpo_step, make_optimizer
from proofpool_arithmetic.build import ModelSpec, create_model
from proofpool_arithmetic.tokenizer import MAX_LENGTH, VOCAB_SIZE

from proofpool.core.rollout import RolloutFileMeta, RolloutSample, rollouts_bytes
from proofpool.infra.storage import rollout_key

NODE = "0x976EA74026E726554dB657fA54763abd0C3a0aa9"
OTHER_NODE = "0x14dC79964da2C08b23698B3D3cc7Ca32193d9955"
POOL = 1
LIMITS = ModelLimits(VOCAB_SIZE, MAX_LENGTH)
TINY = ModelSpec(seed=5, hidden=32, layers=2, heads=1)


def _group(group: int, seed: int = 7, version: int = 0) -> list[RolloutSample]:
    """Two rows, one right and one wrong: a group with a learning signal."""
    return [
        RolloutSample("add-1-2", group, (1, 5, 6), (7, 2), r, a, seed, 1.0, version, b"")
        for r, a in ((1.0, 0.5), (0.0, -0.5))
    ]


def _file(rows: list[RolloutSample], pool: int = POOL, node: str = NODE) -> bytes:
    return rollouts_bytes(RolloutFileMeta(pool, node), rows)


def _sub(data: bytes, version: int = 0) -> Submission:
    return Submission(hashlib.sha256(data).digest(), POOL, NODE, version)


class FakeLedger:
    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def items(self, resource: str, filters: dict[str, Any]) -> list[dict[str, Any]]:
        assert resource == "submissions"
        return [r for r in self.rows if r["status"] == filters["status"] and filters["pool_id"] == POOL]


class FakeStore:
    """Objects by key; remembers which keys were fetched."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.fetched: list[str] = []

    def get_object(self, key: str) -> bytes:
        self.fetched.append(key)
        return self.objects[key]


def _accept(ledger: FakeLedger, store: FakeStore, data: bytes, *, stored: bytes | None = None) -> bytes:
    """Record `data` as an accepted submission; the store holds `stored` (default: the same bytes)."""
    key = hashlib.sha256(data).digest()
    row = {"work_key": "0x" + key.hex(), "model_version": 0, "block_number": len(ledger.rows), "node": NODE}
    ledger.rows.append({**row, "status": "accepted"})
    store.objects[rollout_key(POOL, NODE, key.hex())] = data if stored is None else stored
    return key


def _source(ledger: FakeLedger, store: FakeStore, state_dir: Path, seen: set[bytes] | None = None) -> RolloutSource:
    return RolloutSource(
        ledger,  # type: ignore[arg-type]
        store,  # type: ignore[arg-type]
        POOL,
        seen or set(),
        limits=LIMITS,
        poisoned=PoisonList.load(state_dir),
    )


def _replace_row(rows: list[RolloutSample], index: int, **changes: Any) -> list[RolloutSample]:
    return [dataclasses.replace(r, **changes) if i == index else r for i, r in enumerate(rows)]


def _finite(model: torch.nn.Module) -> bool:
    return all(bool(torch.isfinite(p).all()) for p in model.parameters())


ROW_TAMPERS: list[tuple[Callable[[RolloutSample], RolloutSample], str]] = [
    (lambda r: dataclasses.replace(r, advantage=math.nan), "non_finite"),
    (lambda r: dataclasses.replace(r, reward=math.inf), "non_finite"),
    (lambda r: dataclasses.replace(r, temperature=math.nan), "non_finite"),
    (lambda r: dataclasses.replace(r, completion_tokens=(2**31 - 1,)), "token_out_of_range"),
    (lambda r: dataclasses.replace(r, prompt_tokens=(1, VOCAB_SIZE)), "token_out_of_range"),
    (lambda r: dataclasses.replace(r, prompt_tokens=(1, -1)), "token_out_of_range"),
    (lambda r: dataclasses.replace(r, completion_tokens=(2,) * MAX_LENGTH), "length_out_of_range"),
    (lambda r: dataclasses.replace(r, prompt_tokens=()), "length_out_of_range"),
    (lambda r: dataclasses.replace(r, model_version=10**12), "model_version_mismatch"),
    (lambda r: dataclasses.replace(r, completion_tokens=()), "length_out_of_range"),
    (lambda r: dataclasses.replace(r, reward=2.0), "reward_out_of_range"),
    (lambda r: dataclasses.replace(r, temperature=0.0), "temperature_out_of_range"),
    (lambda r: dataclasses.replace(r, advantage=1e30), "advantage_mismatch"),  # finite, but not group-centred
    (lambda r: dataclasses.replace(r, advantage=-0.4), "advantage_mismatch"),  # the group no longer sums to 0
    (lambda r: dataclasses.replace(r, problem_id="add-2-2"), "group_mismatch"),
]


@pytest.mark.parametrize(("tamper", "reason"), ROW_TAMPERS)
def test_a_bad_row_takes_its_group_and_only_its_group(tamper: Callable, reason: str) -> None:
    rows = [*_group(0), *_group(1)]
    rows[3] = tamper(rows[3])
    data = _file(rows)
    screened = screen_file(data, _sub(data), LIMITS)
    assert screened.rows == rows[:2]  # group 1 is gone with its bad row, group 0 untouched
    assert screened.rows_dropped == 2
    assert screened.problem is not None and f"row 3: {reason}" in screened.problem


@pytest.mark.parametrize(
    ("data", "sub", "reason"),
    [
        (_file(_group(0)), _sub(_file(_group(1))), "sha256_mismatch"),
        (b"not a parquet file", _sub(b"not a parquet file"), "unreadable: not_parquet"),
        (_file(_group(0), pool=2), _sub(_file(_group(0), pool=2)), "wrong_pool"),
        (_file(_group(0), node=OTHER_NODE), _sub(_file(_group(0), node=OTHER_NODE)), "wrong_node"),
    ],
)
def test_a_bad_file_is_dropped_whole(data: bytes, sub: Submission, reason: str) -> None:
    screened = screen_file(data, sub, LIMITS)
    assert screened.rows == []
    assert screened.problem is not None and screened.problem.startswith(reason)


def test_a_clean_file_passes_untouched() -> None:
    rows = [*_group(0), *_group(1)]
    data = _file(rows)
    assert screen_file(data, _sub(data), LIMITS) == Screened(rows, None, 0)


def test_a_file_whose_bytes_do_not_hash_to_its_work_key_is_skipped_and_recorded(tmp_path: Path) -> None:
    ledger, store = FakeLedger(), FakeStore()
    good = _accept(ledger, store, _file(_group(0, seed=1)))
    swapped = _accept(ledger, store, _file(_group(0, seed=2)), stored=_file(_group(0, seed=3)))
    found = _source(ledger, store, tmp_path).fetch_new(min_version=0)
    assert [key for key, _ in found] == [good]
    assert PoisonList.load(tmp_path).reasons["0x" + swapped.hex()].startswith("sha256_mismatch")


def test_nan_advantage_row_is_dropped_and_the_weights_stay_finite(tmp_path: Path) -> None:
    ledger, store = FakeLedger(), FakeStore()
    rows = _replace_row([*_group(0), *_group(1)], 2, advantage=math.nan)
    key = _accept(ledger, store, _file(rows))
    source = _source(ledger, store, tmp_path)
    gathered = gather(source, step=0, async_level=2, samples=2, timeout=5, stop=threading.Event(), say=print)
    assert gathered == rows[:2]
    assert "0x" + key.hex() in PoisonList.load(tmp_path).reasons  # recorded, though its good rows are used
    model = create_model(TINY)
    metrics = grpo_step(model, make_optimizer(model, GrpoConfig()), gathered, GrpoConfig())
    assert metrics.stepped and not metrics.skipped_nonfinite
    assert _finite(model)


def test_huge_token_id_does_not_crash_and_the_file_is_not_fetched_after_a_restart(tmp_path: Path) -> None:
    ledger, store = FakeLedger(), FakeStore()
    clean = _accept(ledger, store, _file(_group(0, seed=1)))
    poisoned = _accept(ledger, store, _file(_replace_row(_group(0, seed=2), 0, completion_tokens=(2**31 - 1,))))
    model = create_model(TINY)
    optimizer = make_optimizer(model, GrpoConfig())
    save_state(tmp_path, TrainerState(0, model.state_dict(), optimizer.state_dict()))  # the state before the step

    source = _source(ledger, store, tmp_path)
    found = source.fetch_new(min_version=0)
    assert [key for key, _ in found] == [clean]  # the poisoned file's only group is dropped with its row
    metrics = grpo_step(model, optimizer, [row for _, rows in found for row in rows], GrpoConfig())
    assert metrics.stepped and _finite(model)
    assert PoisonList.load(tmp_path).reasons["0x" + poisoned.hex()].startswith("1 bad rows, first row 0: token_out")

    # a restart before the next save: the state's `seen` knows neither file, the poison list does
    state = load_state(tmp_path)
    assert state is not None and state.seen == set()
    store.fetched.clear()
    again = _source(ledger, store, tmp_path, state.seen).fetch_new(min_version=0)
    assert [key for key, _ in again] == [clean]
    assert store.fetched == [rollout_key(POOL, NODE, clean.hex())]  # the poisoned file was not fetched


def test_the_poison_list_is_plain_json_written_at_once(tmp_path: Path) -> None:
    poison = PoisonList.load(tmp_path)
    poison.record(b"\x01" * 32, "sha256_mismatch: test", pool_id=POOL)
    assert (tmp_path / POISON_FILE).read_text().count("0x" + "01" * 32) == 1
    assert b"\x01" * 32 in PoisonList.load(tmp_path)
    assert b"\x02" * 32 not in PoisonList.load(tmp_path)

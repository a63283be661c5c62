"""The DiLoCo aggregator (`proofpool trainer run` on a training pool) and `proofpool ledger
verify-round` on the real market: anvil with a `diloco://` pool, the indexer and backend (the
ledger the aggregator reads), SeaweedFS. Two member nodes train for real (`run_inner`), upload
their files and submit; the devnet validator key attests them directly (the validator's own tests
cover how verdicts are reached). The aggregator closes the round, publishes checkpoint v+1, and
verify-round recomputes it bit for bit from the chain and the store alone; a fresh process
(other state and cache directories, after the chain is rewound) publishes the same manifest; a
round short of a member closes at its deadline; a tampered checkpoint or file is refuted.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import redis
import torch
from eth_account.signers.local import LocalAccount
from proofpool.cli.main import app
from proofpool.devnet.market import NODE_COMPUTE_UNITS, PROVIDER_STAKE, onboard_node, time_travel
from proofpool.devnet.stack import DevnetStack, start_stack
from proofpool.trainer.aggregate import Aggregator, AggregatorConfig, read_rounds
from typer.testing import CliRunner, Result

from proofpool.core.diloco.shard import node_rows
from proofpool.core.diloco.spec import CodecSpec, DilocoModel, DilocoSpec, InnerSpec, OuterSpec, ReplaySpec, RoundSpec
from proofpool.core.diloco.update_file import UpdateMeta, encode_update
from proofpool.infra.chain.bindings import NO_EVIDENCE
from proofpool.infra.chain.client import ChainClient
from proofpool.infra.chain.signing import sign_invite
from proofpool.infra.checkpoint import onchain_checkpoint, publish_checkpoint
from proofpool.infra.config import get_settings
from proofpool.infra.http.ledger_client import LedgerClient
from proofpool.infra.storage import ObjectStore, update_key
from proofpool.infra.storage.seaweed import SeaweedProcess
from proofpool.training.dataset import dataset_spec, write_dataset
from proofpool.training.inner import TrainJob, run_inner
from proofpool.training.published import diloco_uri, publish_diloco_spec
from proofpool.training.rounds import outer_round, read_weights, round_checkpoint, write_round_checkpoint
from proofpool.training.updates import fetch_update
from proofpool.training.verify_round import RoundRefuted, verify_round
from tests.fixtures.postgres import migrated_database
from tests.unit.test_training_inner import SEQ_LEN, VOCAB, tiny_llama

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

AGGREGATOR_REDIS_DB = 5
DEADLINE = 3_600


@dataclass
class TrainingPool:
    stack: DevnetStack
    store: ObjectStore
    spec: DilocoSpec
    tokens: torch.Tensor
    root: Path

    @property
    def pool_id(self) -> int:
        return self.stack.pool_id

    @property
    def nodes(self) -> tuple[LocalAccount, LocalAccount]:
        return self.stack.cast.alice_node, self.stack.cast.bob_node

    @property
    def manager(self) -> ChainClient:
        return self.stack.admin.as_account(self.stack.cast.manager)

    def latest(self) -> int:
        latest = self.stack.admin.pool.latest_checkpoint(self.pool_id)
        return latest.version if latest.published_at else 0

    def checkpoint(self, version: int) -> Path:
        return round_checkpoint(self.stack.admin, self.store, self.spec, self.pool_id, version, self.root / "cache")

    def manifest_hex(self, version: int) -> str:
        if version == 0:
            assert self.spec.model.manifest_sha256 is not None
            return self.spec.model.manifest_sha256
        anchored = onchain_checkpoint(self.stack.admin, self.pool_id, version)
        assert anchored is not None
        return anchored.manifest_sha256.hex()

    def submit(self, node: LocalAccount, round_: int) -> str:
        """Train `node`'s share of round `round_` for real, upload, submit, attest; the work key (hex)."""
        spec, address = self.spec, node.address
        rows = node_rows(spec, self.pool_id, round_, address)
        result = run_inner(
            TrainJob(self.pool_id, round_, address, self.checkpoint(round_), self.tokens, rows, spec.inner)
        )
        meta = UpdateMeta(
            pool_id=self.pool_id,
            node=address,
            round=round_,
            base_manifest_sha256=self.manifest_hex(round_),
            spec_sha256=spec.sha256(),
            codec=spec.codec.name,
            block_size=spec.codec.block_size,
            inner_steps=spec.inner.steps,
            tokens=spec.work_units,
            losses=tuple(result.losses),
        )
        data = encode_update(result.pseudo_gradient, meta)
        key = hashlib.sha256(data).digest()
        self.store.put_object(update_key(self.pool_id, address, key.hex()), data)
        admin = self.stack.admin
        admin.as_account(node).pool.submit_work(self.pool_id, address, key, spec.work_units, round_)
        admin.as_account(self.stack.cast.validator).pool.attest_work(self.pool_id, [key], NO_EVIDENCE)
        return key.hex()

    def wait_accepted(self, keys: list[str], timeout: float = 60) -> None:
        wanted = {"0x" + key for key in keys}
        deadline = time.monotonic() + timeout
        with LedgerClient(self.stack.backend_url) as ledger:
            while time.monotonic() < deadline:
                rows = ledger.items("submissions", {"pool_id": self.pool_id, "status": "accepted"})
                if wanted <= {row["work_key"] for row in rows}:
                    return
                time.sleep(0.2)
        raise AssertionError("the indexer did not record the attestations")

    def aggregator(self, name: str, ledger: LedgerClient, lines: list[str]) -> Aggregator:
        """An aggregator with fresh state and cache directories (nothing of another run's)."""
        config = AggregatorConfig(
            pool_id=self.pool_id,
            poll_interval=0.2,
            shard_size=64 * 1024,
            state_dir=self.root / name / "state",
            checkpoint_cache_dir=self.root / name / "cache",
        )
        return Aggregator(config, self.manager, self.store, ledger, say=lines.append)

    def verify_cli(self, version: int, monkeypatch: pytest.MonkeyPatch) -> Result:
        """`proofpool ledger verify-round POOL VERSION` in-process, with the stack's settings."""
        for name, value in {**self.stack.env, "PROOFPOOL_CHECKPOINT_CACHE_DIR": str(self.root / "audit-cli")}.items():
            monkeypatch.setenv(name, value)
        get_settings.cache_clear()
        try:
            return CliRunner().invoke(app, ["ledger", "verify-round", str(self.pool_id), str(version)])
        finally:
            get_settings.cache_clear()

    def cli(self, *args: str, cache: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "proofpool.cli.main", *args],
            env={**self.stack.env, "PROOFPOOL_CHECKPOINT_CACHE_DIR": str(cache)},
            capture_output=True,
            text=True,
            timeout=300,
        )


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory, seaweed: SeaweedProcess) -> Iterator[TrainingPool]:
    """A started training pool whose spec (tiny Llama, random-token dataset, rounds closing at
    once when both members contributed or after an hour with one file) is in the store, with
    alice's and bob's nodes as members."""
    root = tmp_path_factory.mktemp("aggregator")
    store = ObjectStore.from_settings(seaweed.settings(get_settings()))
    model = tiny_llama(root / "model", seed=5)
    tokens = torch.randint(0, VOCAB, (40, SEQ_LEN), generator=torch.Generator().manual_seed(23), dtype=torch.int32)
    write_dataset(tokens, root / "data.safetensors", name="aggregator-test")
    spec = DilocoSpec(
        model=DilocoModel("LlamaForCausalLM", VOCAB),
        dataset=dataset_spec(root / "data.safetensors", eval_sequences=8),
        inner=InnerSpec(steps=2, batch_size=4, lr=1e-3),
        outer=OuterSpec(lr=0.7, momentum=0.9, nesterov=True),
        codec=CodecSpec(),
        round=RoundSpec(deadline_seconds=DEADLINE, min_contributors=1),
        validation=ReplaySpec(),
    )
    stored = publish_diloco_spec(store, spec, model, root / "data.safetensors")
    redis_url = get_settings().redis_url.rsplit("/", 1)[0] + f"/{AGGREGATOR_REDIS_DB}"
    redis.Redis.from_url(redis_url).flushdb()
    with migrated_database("proofpool_test_aggregator") as url:
        stack = start_stack(
            root / "stack",
            database_url=url,
            redis_url=redis_url,
            s3_env=seaweed.env(),
            model_uri=diloco_uri(stored.sha256()),
        )
        try:
            admin, cast = stack.admin, stack.cast
            expiry = admin.w3.eth.get_block("latest")["timestamp"] + 24 * 3600
            for nonce, (provider, node) in enumerate(((cast.alice, cast.alice_node), (cast.bob, cast.bob_node))):
                onboard_node(admin, provider, node, PROVIDER_STAKE, NODE_COMPUTE_UNITS, pools=(stack.pool_id,))
                invite = sign_invite(
                    cast.manager, stack.pool_id, node.address, nonce, expiry, admin.chain_id, admin.pool.address
                )
                admin.as_account(provider).pool.join_pool(invite)
            yield TrainingPool(stack, store, stored, tokens, root)
        finally:
            stack.close()


def test_rounds_close_publish_and_recompute_bitwise(pool: TrainingPool, monkeypatch: pytest.MonkeyPatch) -> None:
    start = pool.latest()
    keys = [pool.submit(node, start) for node in pool.nodes]
    pool.wait_accepted(keys)
    snapshot = pool.stack.anvil.rpc("evm_snapshot")

    # Both members have an accepted file: the round closes at once, long before its deadline.
    lines: list[str] = []
    with LedgerClient(pool.stack.backend_url) as ledger:
        aggregator = pool.aggregator("first", ledger, lines)
        result = aggregator.close_round()
    assert result is not None, lines
    assert (result.round, result.version, result.closed) == (start, start + 1, "all_members")
    assert list(result.included) == sorted(keys)
    assert {c.lower() for c in result.contributors} == {n.address.lower() for n in pool.nodes}
    assert pool.latest() == start + 1
    published = pool.manifest_hex(start + 1)
    assert result.manifest_sha256 == published
    assert any(line.startswith(f"round {start}: 2 contributors (all members)") for line in lines), lines
    rows = read_rounds(aggregator.config.state_dir)
    assert rows[-1]["version"] == start + 1 and rows[-1]["included"] == sorted(keys)
    assert rows[-1]["eval_loss"] > 0 and set(rows[-1]["seconds"]) == {"wait", "fetch", "aggregate", "publish", "eval"}
    if start == 0:  # a fresh run first records the base model
        assert rows[0]["version"] == 0 and rows[0]["round"] is None and rows[0]["eval_loss"] > 0

    # An auditor recomputes it from the chain and the store, in-process and with the CLI.
    check = verify_round(pool.stack.admin, pool.store, pool.pool_id, start + 1, pool.root / "audit")
    assert check.ok, check.diffs
    assert check.line() == f"OK: checkpoint {start + 1} recomputed bitwise from 2 files"
    done = pool.verify_cli(start + 1, monkeypatch)
    assert done.exit_code == 0, done.output
    assert f"OK: checkpoint {start + 1} recomputed bitwise from 2 files" in done.output

    # Rewind the chain to before the publication: `proofpool trainer run` in a fresh process, with
    # other state and cache directories, publishes the very same manifest.
    pool.stack.anvil.rpc("evm_revert", [snapshot])
    assert pool.latest() == start
    fresh = pool.root / "restarted"
    done = pool.cli(
        "trainer", "run", "--pool", str(pool.pool_id), "--key", pool.stack.cast.manager.key.hex(),
        "--rounds", "1", "--state-dir", str(fresh / "state"), "--shard-mb", "0.065536",
        cache=fresh / "cache",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"round {start}: 2 contributors (all members)" in done.stdout
    assert pool.latest() == start + 1
    assert pool.manifest_hex(start + 1) == published
    assert read_rounds(fresh / "state")[-1]["manifest_sha256"] == published

    # The next round with one member's file: it waits, then closes at the deadline.
    alone = pool.submit(pool.nodes[0], start + 1)
    pool.wait_accepted([alone])
    lines = []
    with LedgerClient(pool.stack.backend_url) as ledger:
        aggregator = pool.aggregator("second", ledger, lines)
        assert aggregator.close_round() is None
        assert any(
            line.startswith(f"round {start + 1}: 1 usable files (1 of 2 active members), deadline in") for line in lines
        ), lines
        time_travel(pool.stack.admin, DEADLINE)
        result = aggregator.close_round()
    assert result is not None and result.closed == "deadline" and result.included == (alone,)
    check = verify_round(pool.stack.admin, pool.store, pool.pool_id, start + 2, pool.root / "audit")
    assert check.ok and check.line() == f"OK: checkpoint {start + 2} recomputed bitwise from 1 files"


def test_verify_round_refutes_a_checkpoint_off_its_round_and_a_swapped_file(
    pool: TrainingPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    start = pool.latest()
    keys = [pool.submit(node, start) for node in pool.nodes]
    pool.wait_accepted(keys)
    previous = pool.checkpoint(start)
    shapes = {name: tuple(t.shape) for name, t in read_weights(previous).items()}
    updates = [
        (key, fetch_update(pool.store, pool.spec, pool.pool_id, node.address, key, start, shapes))
        for key, node in zip(keys, pool.nodes, strict=True)
    ]
    weights, momentum, record = outer_round(previous, updates, pool.spec, pool.pool_id, start, pool.manifest_hex(start))
    tampered = "model.norm.weight"
    weights = {**weights, tampered: weights[tampered] + 1e-3}
    out = pool.root / "tampered" / "model"
    write_round_checkpoint(previous, weights, momentum, record, out)
    publish_checkpoint(pool.manager, pool.store, pool.pool_id, start + 1, out, 64 * 1024)

    check = verify_round(pool.stack.admin, pool.store, pool.pool_id, start + 1, pool.root / "audit")
    assert not check.ok and check.record_diff is None
    assert [(d.kind, d.name) for d in check.diffs] == [("weights", tampered)]
    assert check.diffs[0].max_abs_diff == pytest.approx(1e-3, rel=1e-2)
    done = pool.verify_cli(start + 1, monkeypatch)
    assert done.exit_code == 1, done.output
    assert f"weights {tampered}: max abs diff 0.001" in done.output

    # A file swapped in the store after the fact no longer hashes to its on-chain work key.
    node = pool.nodes[0]
    key = next(k for k, n in zip(keys, pool.nodes, strict=True) if n is node)
    object_key = update_key(pool.pool_id, node.address, key)
    original = pool.store.get_object(object_key)
    pool.store.put_object(object_key, original[:-1] + bytes([original[-1] ^ 1]))
    try:
        with pytest.raises(RoundRefuted, match="sha256_mismatch"):
            verify_round(pool.stack.admin, pool.store, pool.pool_id, start + 1, pool.root / "audit")
    finally:
        pool.store.put_object(object_key, original)

    # A round record that reuses files of another round (here: the previous one's) is refuted too.
    forged = replace(record, round=start + 1, version=start + 2, previous_manifest_sha256=pool.manifest_hex(start + 1))
    out = pool.root / "forged" / "model"
    write_round_checkpoint(pool.checkpoint(start + 1), weights, momentum, forged, out)
    publish_checkpoint(pool.manager, pool.store, pool.pool_id, start + 2, out, 64 * 1024)
    with pytest.raises(RoundRefuted, match=f"submitted for model version {start}, not {start + 1}"):
        verify_round(pool.stack.admin, pool.store, pool.pool_id, start + 2, pool.root / "audit")

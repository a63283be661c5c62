"""A validator judging a training pool's files (`proofpool.validator.pipeline.validate`) on a real
chain (its own anvil), PostgreSQL and object store (SeaweedFS).

The pool is created as pool creators do: its spec, base model and dataset published
(`publish_diloco_spec`), its model URI `diloco://<sha>` and its `specSha256` the same hash. Nodes'
files are made as workers make them (`run_inner` from the round's checkpoint on the node's shard,
`encode_update`), uploaded under `update_key` and submitted on-chain; the submission is indexed by
hand (the row the indexer writes), and the validator decides in-process: it replays every file
(the spec's sample rate is 1), and its decision and evidence document are read back.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
import torch
from eth_account import Account
from eth_account.signers.local import LocalAccount
from proofpool.devnet.market import Cast, devnet_pool_params, onboard_node, open_market
from proofpool.validator.models import ModelCache
from proofpool.validator.pipeline import Outcome, Result, validate
from proofpool.validator.resources import Resources
from psycopg_pool import ConnectionPool
from web3 import Web3

from proofpool.core.diloco.shard import node_rows
from proofpool.core.diloco.spec import (
    CodecSpec,
    DilocoModel,
    DilocoSpec,
    InnerSpec,
    OuterSpec,
    ReplaySpec,
    RoundSpec,
    parse_diloco_spec,
)
from proofpool.core.diloco.update_file import UpdateMeta, encode_update
from proofpool.envs.published import spec_key
from proofpool.infra.chain.anvil import AnvilProcess, start_anvil
from proofpool.infra.chain.client import ChainClient
from proofpool.infra.chain.deploy import AddressBook, deploy_contracts
from proofpool.infra.chain.rpc import connect
from proofpool.infra.chain.signing import sign_invite
from proofpool.infra.chain.tx import TxSender
from proofpool.infra.chain.units import TOKEN
from proofpool.infra.checkpoint import publish_checkpoint
from proofpool.infra.config import Settings, get_settings
from proofpool.infra.served import ServedPools
from proofpool.infra.storage import ObjectStore, evidence_key, update_key
from proofpool.infra.storage.seaweed import SeaweedProcess
from proofpool.training.dataset import dataset_spec, load_dataset, write_dataset
from proofpool.training.inner import TrainJob, run_inner
from proofpool.training.published import diloco_uri, publish_diloco_spec
from proofpool.training.rounds import round_checkpoint
from tests.fixtures.postgres import migrated_database
from tests.unit.test_training_inner import SEQ_LEN, VOCAB, tiny_llama

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@dataclass
class TrainingMarket:
    anvil: AnvilProcess
    w3: Web3
    book: AddressBook
    cast: Cast
    pool_id: int
    spec: DilocoSpec
    """As published: its sha256 is the pool's."""
    model_dir: Path
    tokens: torch.Tensor
    database_url: str
    store: ObjectStore
    settings: Settings
    worker_cache: Path

    def client(self, account: LocalAccount | None = None) -> ChainClient:
        return ChainClient.build(self.w3, self.book, account)

    def new_node(self, pool_id: int | None = None) -> LocalAccount:
        """A fresh provider (minted, staked) with a fresh node that joined the pool (or `pool_id`)."""
        pool_id = pool_id or self.pool_id
        admin = self.client(self.cast.admin)
        provider, node = Account.create(), Account.create()
        TxSender(self.w3, self.cast.admin).transfer_eth(provider.address, 3 * 10**18)
        admin.token.mint(provider.address, 300 * TOKEN)
        onboard_node(admin, provider, node, 200 * TOKEN, compute_units=1, pools=(pool_id,))
        expiry = self.w3.eth.get_block("latest")["timestamp"] + 3600
        nonce = int.from_bytes(os.urandom(8), "big")
        invite = sign_invite(
            self.cast.manager, pool_id, node.address, nonce, expiry, admin.chain_id, admin.pool.address
        )
        admin.as_account(node).pool.join_pool(invite)
        return node

    def checkpoint(self, version: int) -> Path:
        """What a worker trains from: checkpoint `version`, verified (against the chain for v >= 1)."""
        return round_checkpoint(self.client(), self.store, self.spec, self.pool_id, version, self.worker_cache)

    def train(self, node: str, version: int) -> tuple[dict[str, torch.Tensor], list[float]]:
        """The honest inner phase of `node` in round `version`."""
        rows = node_rows(self.spec, self.pool_id, version, node)
        job = TrainJob(self.pool_id, version, node, self.checkpoint(version), self.tokens, rows, self.spec.inner)
        result = run_inner(job)
        return result.pseudo_gradient, result.losses

    def meta(self, node: str, version: int, losses: list[float], **changes: Any) -> UpdateMeta:
        base = (
            self.spec.model.manifest_sha256
            if version == 0
            else self.client().pool.latest_checkpoint(self.pool_id).manifest_sha256.hex()
        )
        honest = UpdateMeta(
            pool_id=self.pool_id,
            node=node,
            round=version,
            base_manifest_sha256=str(base),
            spec_sha256=self.spec.sha256(),
            codec=self.spec.codec.name,
            block_size=self.spec.codec.block_size,
            inner_steps=self.spec.inner.steps,
            tokens=self.spec.work_units,
            losses=tuple(losses),
        )
        return dataclasses.replace(honest, **changes)

    def submit(self, node: LocalAccount, data: bytes | None, version: int, work_units: int | None = None) -> bytes:
        """Upload `data` (None: nothing) under the node's update key, `submitWork` it, and index the
        submission as the indexer would; returns the work key."""
        key = hashlib.sha256(data or os.urandom(32)).digest()
        if data is not None:
            self.store.put_object(update_key(self.pool_id, node.address, key.hex()), data)
        units = self.spec.work_units if work_units is None else work_units
        receipt = self.client(node).pool.submit_work(self.pool_id, node.address, key, units, version)
        block = self.w3.eth.get_block(receipt["blockNumber"])
        provider = self.client().pool.get_work(self.pool_id, key).provider
        with psycopg.connect(self.database_url, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO submissions (pool_id, work_key, node, provider, work_units, model_version, status,"
                " submitted_at, block_number, tx_hash, log_index)"
                " VALUES (%s, %s, %s, %s, %s, %s, 'pending', to_timestamp(%s), %s, %s, 0)",
                (
                    self.pool_id,
                    key,
                    node.address,
                    provider,
                    units,
                    version,
                    block["timestamp"],
                    block["number"],
                    bytes(receipt["transactionHash"]),
                ),
            )
        return key

    def validate(self, key: bytes, **settings: Any) -> Result:
        """`validate` in a fresh validator process's resources (its own caches), as `cast.validator`."""
        client = self.client(self.cast.validator)
        config = self.settings.model_copy(update=settings)
        pool = ConnectionPool(self.database_url, min_size=1, max_size=2, open=True)
        models = ModelCache(client, self.store, config.checkpoint_cache_dir, relays=())
        res = Resources(config, self.cast.validator, client, pool, self.store, models, ServedPools(everything=True))
        try:
            return validate(res, self.pool_id, key)
        finally:
            res.close()

    def decision(self, key: bytes) -> tuple[str, str | None]:
        with psycopg.connect(self.database_url) as conn:
            row = conn.execute("SELECT verdict, reason FROM validations WHERE work_key = %s", (key,)).fetchone()
        assert row is not None
        return row[0], row[1]

    def evidence(self, key: bytes) -> dict[str, Any]:
        raw = self.store.get_object(evidence_key(self.pool_id, key.hex(), self.cast.validator.address))
        return json.loads(raw)


@pytest.fixture(scope="module")
def market(
    object_store: ObjectStore, seaweed: SeaweedProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TrainingMarket]:
    root = tmp_path_factory.mktemp("training-pool")
    model_dir = tiny_llama(root / "model", seed=5)
    tokens = torch.randint(0, VOCAB, (40, SEQ_LEN), generator=torch.Generator().manual_seed(23), dtype=torch.int32)
    dataset = root / "data.safetensors"
    write_dataset(tokens, dataset, name="validator-integration")
    spec = DilocoSpec(
        model=DilocoModel("LlamaForCausalLM", VOCAB),
        dataset=dataset_spec(dataset, eval_sequences=8),
        inner=InnerSpec(steps=2, batch_size=4, lr=1e-3),
        outer=OuterSpec(),
        codec=CodecSpec(),
        round=RoundSpec(deadline_seconds=60, min_contributors=1),
        validation=ReplaySpec(sample_rate=1.0, tolerance=0.05),
    )
    stored = publish_diloco_spec(object_store, spec, model_dir, dataset)
    with start_anvil() as anvil, migrated_database("proofpool_test_training_pool") as url:
        cast = Cast()
        w3 = connect(anvil.url)
        book = deploy_contracts(w3, TxSender(w3, cast.admin))
        admin = ChainClient.build(w3, book, cast.admin)
        sha = stored.sha256()
        params = dataclasses.replace(
            devnet_pool_params(cast), model_uri=diloco_uri(sha), spec_sha256=bytes.fromhex(sha)
        )
        pool_id = open_market(admin, cast, params)
        settings = seaweed.settings(get_settings()).model_copy(
            update={"checkpoint_cache_dir": root / "validator-cache", "upload_max_bytes": 1 << 20}
        )
        yield TrainingMarket(
            anvil,
            w3,
            book,
            cast,
            pool_id,
            stored,
            model_dir,
            load_dataset(dataset, stored.dataset.sha256),
            url,
            object_store,
            settings,
            root / "worker-cache",
        )


@pytest.fixture(scope="module")
def honest(market: TrainingMarket) -> tuple[LocalAccount, bytes, dict[str, torch.Tensor], list[float]]:
    """One node's honest file of round 0, judged: (node, work key, pseudo-gradient, losses)."""
    node = market.new_node()
    delta, losses = market.train(node.address, 0)
    key = market.submit(node, encode_update(delta, market.meta(node.address, 0, losses)), 0)
    result = market.validate(key)
    assert result.outcome is Outcome.DECIDED and result.selected
    return node, key, delta, losses


def test_an_honest_file_is_replayed_bitwise_and_accepted_with_its_evidence(market: TrainingMarket, honest) -> None:
    _, key, delta, _ = honest
    assert market.decision(key) == ("accepted", None)
    document = market.evidence(key)
    assert document["verdict"] == "accepted" and document["file_sha256"] == key.hex()
    evidence = document["evidence"]
    assert evidence["batch"] == 0 and evidence["round"] == 0 and evidence["bitwise"] is True
    assert evidence["relative_l2"] < 0.01 and evidence["tolerance"] == 0.05
    norm = float(torch.sqrt(sum((t.double() ** 2).sum() for t in delta.values())))
    assert evidence["norm"] == pytest.approx(norm, rel=0.01)


def test_a_second_file_of_one_node_in_one_round_is_a_duplicate_batch(market: TrainingMarket, honest) -> None:
    """The same honest work in other bytes (another loss trace): it replays fine, but the node's
    round is paid once."""
    node, first, delta, losses = honest
    again = encode_update(delta, market.meta(node.address, 0, [x + 1e-3 for x in losses]))
    key = market.submit(node, again, 0)
    result = market.validate(key)
    assert result.verdict is not None and result.verdict.reason == "duplicate_batch"
    assert result.verdict.evidence["first_work_key"] == first.hex()
    assert market.decision(key) == ("invalid", "duplicate_batch")


def test_a_scaled_pseudo_gradient_is_a_mismatch_with_the_comparison_as_evidence(market: TrainingMarket, honest) -> None:
    """A node that multiplies its update by 10 (to weigh more in the average) keeps every int8 code:
    only the dequantized comparison with the replay catches it. Its norm, measured against the
    round's accepted files (the honest node's), is flagged too."""
    node = market.new_node()
    delta, losses = market.train(node.address, 0)
    scaled = encode_update({n: t * 10 for n, t in delta.items()}, market.meta(node.address, 0, losses))
    key = market.submit(node, scaled, 0)
    market.validate(key)
    assert market.decision(key) == ("invalid", "pseudo_gradient_mismatch")
    evidence = market.evidence(key)["evidence"]
    assert evidence["relative_l2"] == pytest.approx(9.0, rel=0.01) and evidence["bitwise"] is False
    assert len(evidence["replay_sha256"]) == 64 and evidence["replay_seconds"] > 0
    assert "norm_high" in evidence["flags"] and evidence["norm_ratio"] > 3


def test_a_file_never_uploaded_is_missing_once_the_grace_has_passed(market: TrainingMarket) -> None:
    node = market.new_node()
    key = market.submit(node, None, 0)
    market.validate(key, validator_missing_grace=0.001)
    assert market.decision(key) == ("invalid", "missing")


def test_work_units_must_be_the_specs(market: TrainingMarket) -> None:
    node = market.new_node()
    delta, losses = market.train(node.address, 0)
    data = encode_update(delta, market.meta(node.address, 0, losses))
    key = market.submit(node, data, 0, work_units=market.spec.work_units * 4)
    market.validate(key)
    assert market.decision(key) == ("invalid", "wrong_units")


def test_after_the_next_checkpoint_the_round_is_judged_against_the_chain(market: TrainingMarket) -> None:
    """Checkpoint 1 published on-chain: a file of round 1 trained from it is replayed from the
    chain-anchored checkpoint and accepted; one claiming the spec's base for round 1 is `wrong_base`;
    round 0 submitted after the grace is `stale`; round 2 (not published) is `wrong_round`."""
    manager = market.client(market.cast.manager)
    publish_checkpoint(manager, market.store, market.pool_id, 1, market.model_dir)

    node = market.new_node()
    delta, losses = market.train(node.address, 1)
    key = market.submit(node, encode_update(delta, market.meta(node.address, 1, losses)), 1)
    market.validate(key)
    assert market.decision(key) == ("accepted", None)
    assert market.evidence(key)["evidence"]["bitwise"] is True

    node = market.new_node()
    old_base = market.meta(node.address, 1, losses, base_manifest_sha256=market.spec.model.manifest_sha256)
    key = market.submit(node, encode_update(delta, old_base), 1)
    market.validate(key)
    assert market.decision(key) == ("invalid", "wrong_base")

    node = market.new_node()
    delta, losses = market.train(node.address, 0)
    key = market.submit(node, encode_update(delta, market.meta(node.address, 0, losses)), 0)
    market.validate(key, validator_stale_grace=0.0)
    assert market.decision(key) == ("invalid", "stale")
    evidence = market.evidence(key)["evidence"]
    assert evidence["latest_version"] == 1 and evidence["superseded_before"] >= 0

    node = market.new_node()
    ahead = market.meta(node.address, 2, losses, base_manifest_sha256="ab" * 32)
    key = market.submit(node, encode_update(delta, ahead), 2)
    market.validate(key)
    assert market.decision(key) == ("invalid", "wrong_round")


def test_a_pool_whose_spec_replays_nothing_gets_the_cheap_checks_only(market: TrainingMarket) -> None:
    """The share of files replayed is the pool's (`validation.sample_rate`), not the validator's
    own setting (1 here): at 0 nothing is replayed, so even a scaled file passes, and a file with
    the wrong work units is still caught."""
    spec = parse_diloco_spec({**market.spec.to_json(), "validation": {"sample_rate": 0.0, "tolerance": 0.05}})
    market.store.put_object(spec_key(spec.sha256()), spec.canonical())  # same model and dataset
    admin = market.client(market.cast.admin)
    params = dataclasses.replace(
        devnet_pool_params(market.cast), model_uri=diloco_uri(spec.sha256()), spec_sha256=bytes.fromhex(spec.sha256())
    )
    pool_id, _ = admin.pool.create_pool(params)
    admin.token.approve(admin.pool.address, 100 * TOKEN)
    admin.pool.fund_pool(pool_id, 100 * TOKEN)
    admin.pool.start_pool(pool_id)
    sampled = dataclasses.replace(market, pool_id=pool_id, spec=spec)

    node = sampled.new_node()
    delta, losses = market.train(node.address, 0)  # any 10x file: it is never compared
    meta = sampled.meta(node.address, 0, losses)
    key = sampled.submit(node, encode_update({n: t * 10 for n, t in delta.items()}, meta), 0)
    result = sampled.validate(key, validator_sample_rate=1.0)
    assert result.outcome is Outcome.DECIDED and not result.selected
    assert sampled.decision(key) == ("accepted", None)
    assert "relative_l2" not in sampled.evidence(key)["evidence"]

    node = sampled.new_node()
    key = sampled.submit(node, encode_update(delta, sampled.meta(node.address, 0, losses)), 0, work_units=1)
    sampled.validate(key)
    assert sampled.decision(key) == ("invalid", "wrong_units")

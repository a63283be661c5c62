"""A real pool in the real market: a tiny Qwen3 (byte-level BPE, ChatML, built here) on reasoning-gym
problems, created as a `spec://<sha256>` pool, with anvil, PostgreSQL, Redis, SeaweedFS, the
indexer dispatching validations, the backend handing out the spec's assignments, a Celery
validator, and workers as `proofpool worker run` processes (vLLM).

An honest node's file is attested; a node that generates with other weights (`--base-model` of
another seed: the other-model cheat) is rejected by TOPLOC and its provider slashed. No arithmetic,
no devnet tokenizer anywhere on the path."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
from proofpool.devnet.market import NODE_COMPUTE_UNITS, PROVIDER_STAKE, devnet_pool_params, onboard_node
from proofpool.devnet.services import Service, wait_until
from proofpool.devnet.tiny_model import TinyQwenSpec, build_tiny_qwen3

from proofpool.core.spec import PoolSpec
from proofpool.envs.published import publish_spec, spec_uri
from proofpool.envs.spec import build_spec
from proofpool.envs.tasks import load_task_environment
from proofpool.infra.chain.anvil import free_port
from proofpool.infra.chain.bindings import WorkStatus, reason_text
from proofpool.infra.chain.deploy import grant_validator
from proofpool.infra.chain.tx import TxSender
from proofpool.infra.chain.units import TOKEN
from proofpool.infra.config import get_settings
from proofpool.infra.storage import ObjectStore
from proofpool.infra.storage.seaweed import SeaweedProcess
from tests.fixtures.market import Market

pytestmark = [pytest.mark.slow, pytest.mark.vllm, pytest.mark.timeout(900)]

CONFIG = {"tasks": {"gcd": 1, "basic_arithmetic": 1}, "seed": 9, "size": 300}
WORKER_TIMEOUT = 420.0
VERDICT_TIMEOUT = 180.0


@dataclasses.dataclass
class SpecMarket:
    market: Market
    pool_id: int
    spec: PoolSpec
    other_model: Path
    validator: Service


@pytest.fixture(scope="module")
def spec_market(
    validated_market: Market, seaweed: SeaweedProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SpecMarket]:
    stack, root = validated_market.stack, tmp_path_factory.mktemp("spec-market")
    admin, cast = stack.admin, stack.cast
    tasks = load_task_environment("reasoning-gym", CONFIG)
    corpus = [m.content for i in range(30) for m in tasks.problem(i).messages]
    base = build_tiny_qwen3(root / "base", corpus)
    other = build_tiny_qwen3(root / "other", corpus, TinyQwenSpec(seed=1))
    assert (base / "tokenizer.json").read_bytes() == (other / "tokenizer.json").read_bytes()  # only weights differ
    spec = build_spec(
        "reasoning-gym", CONFIG, base, batch_size=2, group_size=2, max_prompt_tokens=512, max_tokens=16, temperature=1.0
    )
    stored = publish_spec(ObjectStore.from_settings(seaweed.settings(get_settings())), spec, base)
    pool_id, _ = admin.pool.create_pool(
        dataclasses.replace(
            devnet_pool_params(cast), model_uri=spec_uri(stored.sha256()), spec_sha256=bytes.fromhex(stored.sha256())
        )
    )
    admin.token.approve(admin.pool.address, 500 * TOKEN)
    admin.pool.fund_pool(pool_id, 500 * TOKEN)
    admin.pool.start_pool(pool_id)
    admin.as_account(cast.alice).pool.approve_pool(pool_id, PROVIDER_STAKE)
    onboard_node(admin, cast.bob, cast.bob_node, PROVIDER_STAKE, NODE_COMPUTE_UNITS, pools=(pool_id,))
    grant_validator(admin.w3, TxSender(admin.w3, cast.admin), admin.book, cast.validator.address)
    validator = stack.spawn(
        "spec-validator",
        [
            "validator",
            "run",
            "--key",
            cast.validator.key.hex(),
            "--concurrency",
            "1",
            "--metrics-port",
            str(free_port()),
        ],
        {
            "PROOFPOOL_CHECKPOINT_CACHE_DIR": str(root / "validator-cache"),
            "PROOFPOOL_VERDICT_MAX_WAIT": "1",
            "PROOFPOOL_VALIDATOR_MISSING_GRACE": "30",
        },
    )
    yield SpecMarket(validated_market, pool_id, stored, other, validator)


def _run_worker(sm: SpecMarket, name: str, node_key: str, tmp: Path, *extra: str) -> bytes:
    """One batch of `proofpool worker run` on the spec pool; the work key it submitted."""
    worker = sm.market.stack.spawn(
        name,
        [
            *("worker", "run", "--pool", str(sm.pool_id), "--state-dir", str(tmp / name)),
            *("--idle-interval", "0.5", "--max-batches", "1", *extra),
        ],
        {"PROOFPOOL_NODE_KEY": node_key, "PROOFPOOL_CHECKPOINT_CACHE_DIR": str(tmp / f"{name}-cache")},
    )
    worker.process.wait(timeout=WORKER_TIMEOUT)
    assert worker.process.returncode == 0, worker.log_tail()
    admin = sm.market.stack.admin
    logs = admin.w3.eth.get_logs({"fromBlock": admin.book.deploy_block, "address": admin.pool.address})
    node = admin.w3.eth.account.from_key(node_key).address
    submitted = [
        e.args["workKey"]
        for e in admin.decoder().decode_logs(logs)
        if e.name == "WorkSubmitted" and e.args["poolId"] == sm.pool_id and e.args["node"] == node
    ]
    assert len(submitted) == 1, submitted
    return submitted[0]


def _verdict(sm: SpecMarket, key: bytes) -> tuple[WorkStatus, str | None]:
    pool = sm.market.stack.admin.pool
    wait_until(
        lambda: pool.get_work(sm.pool_id, key).status is not WorkStatus.PENDING,
        timeout=VERDICT_TIMEOUT,
        what=f"a verdict on 0x{key.hex()[:12]}",
        service=sm.validator,
        poll=0.5,
    )
    status = pool.get_work(sm.pool_id, key).status
    admin = sm.market.stack.admin
    logs = admin.w3.eth.get_logs({"fromBlock": admin.book.deploy_block, "address": admin.pool.address})
    reasons = [
        reason_text(e.args["reason"])
        for e in admin.decoder().decode_logs(logs)
        if e.name == "WorkInvalidated" and e.args["workKey"] == key
    ]
    return status, reasons[-1] if reasons else None


def test_an_honest_node_on_a_spec_pool_is_attested(spec_market: SpecMarket, tmp_path: Path) -> None:
    key = _run_worker(spec_market, "spec-honest", spec_market.market.node_key, tmp_path)
    assert _verdict(spec_market, key) == (WorkStatus.ACCEPTED, None)


def test_a_node_generating_with_other_weights_is_slashed(spec_market: SpecMarket, tmp_path: Path) -> None:
    cast = spec_market.market.stack.cast
    stake = spec_market.market.stack.admin.stake_manager
    before = stake.active_stake(cast.bob.address)
    key = _run_worker(
        spec_market, "spec-other-model", cast.bob_node.key.hex(), tmp_path, "--base-model", str(spec_market.other_model)
    )
    status, reason = _verdict(spec_market, key)
    assert status is WorkStatus.INVALID and reason in {"toploc_exp_mismatch", "toploc_mantissa"}, (status, reason)
    assert stake.active_stake(cast.bob.address) < before

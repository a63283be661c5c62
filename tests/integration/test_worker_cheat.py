"""`proofpool worker run --cheat MODE` against the real validated market: anvil, PostgreSQL, Redis,
SeaweedFS, the indexer dispatching a validation task per submission, the backend, one
`proofpool validator run` process, and one cheating worker (vLLM) per mode, each the only node of a
fresh provider (an invalid verdict slashes the provider and ejects the node for good).

The workers run concurrently (started by the module fixture) so the module pays for vLLM's start-up
once in wall time; each test then waits for its own worker's verdict and reads everything it asserts
back from the chain: the work is INVALID with a reason of the check meant to catch the cheat, the node
is SLASHED in the pool and its provider's active stake dropped by the pool's slash amount.
`stale-version` runs last, alone: it is caught only once the pool's latest checkpoint exceeds the
async window (2), so the test publishes checkpoints 1-3 (a seeded, untrained model: the cheater never
loads them) after the other cheaters are done, then starts a worker that is assigned checkpoint 3
and submits version 0 anyway.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from eth_account import Account
from eth_account.signers.local import LocalAccount
from proofpool.devnet.adversary import EXPECTED_REASONS, CheatMode, banner, other_model
from proofpool.devnet.market import onboard_node
from proofpool.devnet.services import Service, wait_until
from proofpool_arithmetic import ENVIRONMENT
from proofpool_arithmetic.build import init_model
from proofpool_arithmetic.cache import ensure_devnet_model

from proofpool.infra.chain.anvil import free_port
from proofpool.infra.chain.bindings import MemberState, WorkStatus, reason_text
from proofpool.infra.chain.events import ChainEvent
from proofpool.infra.chain.tx import TxSender
from proofpool.infra.chain.units import TOKEN
from proofpool.infra.checkpoint import publish_checkpoint
from proofpool.infra.config import get_settings
from proofpool.infra.storage import ObjectStore
from proofpool.infra.storage.seaweed import SeaweedProcess
from tests.fixtures.market import Market

pytestmark = [pytest.mark.slow, pytest.mark.vllm]

STARTUP = 420.0
"""Seconds three concurrent workers may take to load vLLM and submit their batches on 2 busy cores."""
VERDICT_TIMEOUT = 240.0
STAKE = 200 * TOKEN

BATCHES = {CheatMode.OTHER_MODEL: 1, CheatMode.EDIT_TOKENS: 1, CheatMode.REPLAY: 2}
"""Batches each worker submits: `replay` needs an honest first batch to replay in the second."""


@dataclass
class Cheat:
    """One cheating worker: its fresh provider and node, and its process."""

    mode: CheatMode
    provider: LocalAccount
    node: LocalAccount
    stake_before: int
    worker: Service
    batches: int
    """Batches it submits (`--max-batches`)."""


@dataclass
class Drill:
    market: Market
    validator: Service
    cheats: dict[CheatMode, Cheat]


def spawn_cheater(market: Market, mode: CheatMode, root: Path, batches: int) -> Cheat:
    """A fresh provider staking STAKE with a fresh node, and `proofpool worker run --cheat MODE` for it
    (the worker joins the pool by itself with an invite from the backend, as an honest one does)."""
    admin = market.stack.admin
    provider, node = Account.create(), Account.create()
    TxSender(admin.w3, market.stack.cast.admin).transfer_eth(provider.address, 3 * 10**18)
    admin.token.mint(provider.address, STAKE)
    onboard_node(admin, provider, node, STAKE, compute_units=1, pools=(market.pool_id,))
    worker = market.stack.spawn(
        f"worker-{mode.value}",
        ["worker", "run", "--pool", str(market.pool_id), "--state-dir", str(root / mode.value),
         "--idle-interval", "0.5", "--max-batches", str(batches), "--cheat", mode.value],
        {"PROOFPOOL_NODE_KEY": node.key.hex(), "PROOFPOOL_CHECKPOINT_CACHE_DIR": str(root / "checkpoints")},
    )  # fmt: skip
    return Cheat(mode, provider, node, admin.stake_manager.active_stake(provider.address), worker, batches)


@pytest.fixture(scope="module")
def drill(
    validated_market: Market, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Drill]:
    market = validated_market
    selected = [m for m in BATCHES if m in selected_modes(request)]  # `-k replay` starts one worker
    # The models are built (or found) in the shared cache first, so no worker pays for a build and
    # no two race to build the same one.
    ensure_devnet_model(progress=None)
    if CheatMode.OTHER_MODEL in selected:
        other_model(ENVIRONMENT)
    validator = market.stack.spawn(
        "validator",
        ["validator", "run", "--key", market.stack.cast.validator.key.hex(), "--concurrency", "1",
         "--metrics-port", str(free_port())],
        {
            "PROOFPOOL_CELERY_VISIBILITY_TIMEOUT": "30",
            "PROOFPOOL_CHECKPOINT_CACHE_DIR": str(market.stack.root / "validator-checkpoints"),
            "PROOFPOOL_VERDICT_MAX_WAIT": "1",
        },
    )  # fmt: skip
    root = tmp_path_factory.mktemp("cheaters")
    cheats = {mode: spawn_cheater(market, mode, root, BATCHES[mode]) for mode in selected}
    yield Drill(market, validator, cheats)


def selected_modes(request: pytest.FixtureRequest) -> set[CheatMode]:
    """The modes of this module's tests that were collected (after `-k`)."""
    return {
        item.callspec.params["mode"]
        for item in request.session.items
        if item.module is request.module and hasattr(item, "callspec")
    }


def submissions_of(market: Market, node: str) -> list[ChainEvent]:
    """The node's WorkSubmitted and WorkBundleSubmitted events (one per submission), in chain order."""
    client = market.stack.admin
    logs = client.w3.eth.get_logs({"fromBlock": client.book.deploy_block, "address": client.pool.address})
    return [
        e
        for e in client.decoder().decode_logs(logs)
        if e.name in ("WorkSubmitted", "WorkBundleSubmitted")
        and e.args["node"] == node
        and e.args["poolId"] == market.pool_id
    ]


def verdict(drill: Drill, key: bytes) -> tuple[WorkStatus, str | None]:
    """The chain's status of `key` once it is not pending, and the reason of its WorkInvalidated event."""
    client, pool_id = drill.market.stack.admin, drill.market.pool_id
    wait_until(
        lambda: client.pool.get_work(pool_id, key).status is not WorkStatus.PENDING,
        timeout=VERDICT_TIMEOUT,
        what=f"a verdict on 0x{key.hex()[:12]}",
        service=drill.validator,
        poll=0.5,
    )
    status = client.pool.get_work(pool_id, key).status
    logs = client.w3.eth.get_logs({"fromBlock": client.book.deploy_block, "address": client.pool.address})
    reasons = [
        reason_text(e.args["reason"])
        for e in client.decoder().decode_logs(logs)
        if e.name == "WorkInvalidated" and e.args["workKey"] == key
    ]
    assert len(reasons) <= 1, reasons
    return status, reasons[0] if reasons else None


@pytest.mark.parametrize("mode", list(BATCHES), ids=[m.value for m in BATCHES])
def test_a_cheating_worker_is_invalidated_slashed_and_ejected(drill: Drill, mode: CheatMode) -> None:
    assert_caught(drill, drill.cheats[mode])


def assert_caught(drill: Drill, cheat: Cheat) -> None:
    """The cheater's worker ran and exited cleanly, said it cheats, submitted on-chain, and its last
    submission got an INVALID verdict with an expected reason that slashed its provider and node."""
    mode = cheat.mode
    cheat.worker.process.wait(timeout=STARTUP)
    assert cheat.worker.process.returncode == 0, cheat.worker.log_tail()
    log = cheat.worker.log_path.read_text()
    assert banner(mode) in log  # the console and the logs say it is cheating

    events = submissions_of(drill.market, cheat.node.address)
    assert len(events) == cheat.batches, "every batch is submitted on-chain like an honest worker's"
    verdicts = {e.args["workKey"]: verdict(drill, e.args["workKey"]) for e in events}
    invalid = [key for key, (status, _) in verdicts.items() if status is WorkStatus.INVALID]
    # replay: one of its two files (the same rows) is accepted, whichever was judged first
    assert len(invalid) == 1, verdicts
    (cheated,) = invalid
    assert all(v == (WorkStatus.ACCEPTED, None) for key, v in verdicts.items() if key != cheated), verdicts
    status, reason = verdicts[cheated]
    print(f"\n{mode.value}: {status.name} {reason}")
    assert reason in EXPECTED_REASONS[mode], reason

    client, pool_id = drill.market.stack.admin, drill.market.pool_id
    assert client.pool.get_member(pool_id, cheat.node.address).state is MemberState.SLASHED
    slash = client.pool.get_pool(pool_id).slash_amount
    assert slash > 0
    assert client.stake_manager.active_stake(cheat.provider.address) == cheat.stake_before - slash
    with psycopg.connect(drill.market.database_url) as conn:
        row = conn.execute("SELECT verdict, reason FROM validations WHERE work_key = %s", (cheated,)).fetchone()
    assert row == ("invalid", reason)
    assert drill.validator.alive


def test_a_stale_version_worker_is_caught_once_the_pool_moved_past_the_async_window(
    drill: Drill, seaweed: SeaweedProcess, tmp_path: Path
) -> None:
    for cheat in drill.cheats.values():  # the others claimed version 0 on a pool at version 0
        cheat.worker.process.wait(timeout=STARTUP)
    market = drill.market
    manager = market.stack.admin.as_account(market.stack.cast.manager)
    store = ObjectStore.from_settings(seaweed.settings(get_settings()))
    model_dir = init_model(tmp_path / "model", seed=7)
    prefix = f"test/{uuid.uuid4().hex}/"  # the session's bucket is shared with other modules' pools
    for version in (1, 2, 3):
        publish_checkpoint(manager, store, market.pool_id, version, model_dir, shard_size=1 << 20, prefix=prefix)
    stale = spawn_cheater(market, CheatMode.STALE_VERSION, tmp_path, batches=1)
    assert_caught(drill, stale)
    (event,) = submissions_of(market, stale.node.address)
    assert event.args["modelVersion"] == 0
    assert "assigned checkpoint 3, generating with 0 instead" in stale.worker.log_path.read_text()

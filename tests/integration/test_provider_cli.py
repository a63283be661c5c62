"""`proofpool provider status` and `provider claim` as a provider types them, against a real
anvil and a real backend: the chain-loop world (`loop_world`, this module's own anvil) plus a
third pool where alice has work pending, accepted and finalized-but-unclaimed, indexed by the
real indexer and served by `proofpool backend serve` on loopback."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
from proofpool.cli.main import app
from proofpool.devnet.market import devnet_pool_params
from proofpool.devnet.services import http_ok, spawn_cli, wait_until
from typer.testing import CliRunner

from proofpool.core.errors import ConfigError, ProofpoolError
from proofpool.infra.chain.accounts import KEY_PASSWORD_ENV, encrypt_account
from proofpool.infra.chain.anvil import free_port
from proofpool.infra.chain.bindings import NO_EVIDENCE, PoolApproval, PoolParams
from proofpool.infra.chain.client import ChainClient
from proofpool.infra.chain.signing import sign_invite
from proofpool.infra.chain.units import TOKEN
from proofpool.infra.config import get_settings
from tests.fixtures.indexer import LoopWorld, indexer_env, make_indexer
from tests.fixtures.ledger import ledger_redis_url
from tests.fixtures.postgres import migrated_database

PASSWORD = "provider-cli-test"
REWARD_PER_UNIT = TOKEN // 100
DISPUTE_WINDOW = 3600


@dataclass
class Market:
    """`loop_world` plus pool `pool_id`, where alice's node has 300 units paid (credited, not
    withdrawn), 100 units pending and 200 units accepted; indexed and served at `backend_url`."""

    world: LoopWorld
    pool_id: int
    backend_url: str
    deployments: Path

    @property
    def client(self) -> ChainClient:
        return self.world.client


def _third_pool_with_unpaid_work(world: LoopWorld) -> int:
    cast = world.cast
    admin = ChainClient.build(world.w3, world.book, cast.admin)
    params = PoolParams(
        manager=cast.manager.address,
        treasury=cast.treasury.address,
        model_uri="devnet://provider-cli",
        reward_per_unit=REWARD_PER_UNIT,
        validator_fee=TOKEN // 2,
        slash_amount=50 * TOKEN,
        dispute_window=DISPUTE_WINDOW,
        validator_slash_share_bps=5_000,
    )
    pool_id, _ = admin.pool.create_pool(params)
    admin.token.approve(admin.pool.address, 100 * TOKEN)
    admin.pool.fund_pool(pool_id, 100 * TOKEN)
    admin.pool.start_pool(pool_id)

    node = cast.alice_node.address
    expiry = world.w3.eth.get_block("latest")["timestamp"] + 600
    invite = sign_invite(cast.manager, pool_id, node, 7, expiry, world.book.chain_id, admin.pool.address)
    admin.as_account(cast.alice).pool.approve_pool(pool_id, 100 * TOKEN)
    admin.as_account(cast.alice).pool.join_pool(invite)

    submitter, validator = admin.as_account(cast.alice_node), admin.as_account(cast.validator)
    paid, waiting, accepted = (hashlib.sha256(name).digest() for name in (b"paid", b"waiting", b"accepted"))
    submitter.pool.submit_work(pool_id, node, paid, 300, 0)
    validator.pool.attest_work(pool_id, [paid], NO_EVIDENCE)
    world.anvil.rpc("evm_increaseTime", [DISPUTE_WINDOW + 1])
    world.anvil.rpc("evm_mine")
    admin.pool.finalize_work(pool_id, [paid])
    submitter.pool.submit_work(pool_id, node, waiting, 100, 0)
    submitter.pool.submit_work(pool_id, node, accepted, 200, 0)
    validator.pool.attest_work(pool_id, [accepted], NO_EVIDENCE)
    return pool_id


@pytest.fixture(scope="module")
def market(loop_world: LoopWorld, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Market]:
    pool_id = _third_pool_with_unpaid_work(loop_world)
    deployments = tmp_path_factory.mktemp("provider-cli-deployments")
    with migrated_database("proofpool_test_provider_cli") as url:
        make_indexer(loop_world.w3, loop_world.book, url).run(once=True)
        env = indexer_env(url, loop_world.anvil, loop_world.book, deployments, REDIS_URL=ledger_redis_url())
        port = free_port()
        serve = ["backend", "serve", "--port", str(port), "--log-level", "warning", "--no-access-log"]
        log = tmp_path_factory.mktemp("provider-cli-backend") / "backend.log"
        backend = spawn_cli("backend", serve, env, log)
        try:
            base_url = f"http://127.0.0.1:{port}"
            wait_until(lambda: http_ok(f"{base_url}/v1/ledger/pools"), timeout=90, what="the backend", service=backend)
            yield Market(loop_world, pool_id, base_url, deployments)
        finally:
            backend.stop(timeout=10)


@pytest.fixture
def cli(market: Market, monkeypatch: pytest.MonkeyPatch):
    """`proofpool ...` in-process against the market's chain (and its backend unless told otherwise)."""
    monkeypatch.setenv("PROOFPOOL_DEPLOYMENTS_DIR", str(market.deployments))
    monkeypatch.delenv(KEY_PASSWORD_ENV, raising=False)
    get_settings.cache_clear()
    runner = CliRunner(env={"COLUMNS": "250"})

    def invoke(
        *args: str, backend_url: str | None = None, env: dict[str, str] | None = None, fails: type | None = None
    ):
        common = ["--rpc-url", market.world.anvil.url]
        if args[:2] == ("provider", "status"):
            common += ["--backend-url", backend_url or market.backend_url]
        result = runner.invoke(app, [*args, *common], env=env)
        if fails is not None:
            assert isinstance(result.exception, fails), f"{result.output}\n{result.exception!r}"
            return result.exception
        assert result.exit_code == 0, f"{result.output}\n{result.exception!r}"
        return result.stdout

    yield invoke
    get_settings.cache_clear()


def field(out: str, name: str) -> str:
    """The value printed after `name` on a name/value line of the status for people."""
    for line in out.splitlines():
        if line.strip().startswith(name + "  "):
            return line.strip()[len(name) :].strip()
    raise AssertionError(f"no {name!r} line in:\n{out}")


@pytest.fixture
def alice_keystore(market: Market, tmp_path: Path) -> Path:
    path = tmp_path / "alice.json"
    path.write_text(json.dumps(encrypt_account(market.world.cast.alice, PASSWORD, "pbkdf2", 2)))
    return path


@pytest.fixture
def chain_snapshot(market: Market) -> Iterator[None]:
    """Undo a test's transactions (the indexed ledger is not touched by them)."""
    snapshot = market.world.anvil.rpc("evm_snapshot")
    yield
    market.world.anvil.rpc("evm_revert", [snapshot])


def test_status_joins_chain_figures_and_the_ledger_for_alice(cli, market):
    cast, chain = market.world.cast, market.client
    alice = cast.alice.address
    status = json.loads(cli("provider", "status", alice, "--json"))

    assert status["provider"] == alice and status["registered"] is True
    assert status["active_stake"] == chain.stake_manager.active_stake(alice) == 200 * TOKEN
    assert status["required_stake"] == chain.stake_manager.required_stake(alice) == 140 * TOKEN
    assert status["compute_units"] == 4
    assert status["unbonding"] == 0 and status["unbonding_matures_at_utc"] is None
    assert status["unbonding_withdrawable"] is False
    assert status["open_work"] == chain.pool.open_work(alice) == 2  # one pending, one accepted in `market.pool_id`
    assert status["wallet"] == chain.token.balance_of(alice)
    assert status["withdrawable_rewards"] == chain.pool.reward_balance(alice) == 300 * REWARD_PER_UNIT
    assert status["block_number"] == market.world.w3.eth.block_number
    assert status["ledger_error"] is None

    ledger = status["ledger"]
    loop_pool = market.world.loop.pool_id
    expected_nodes = [
        {
            "address": cast.alice_node.address,
            "compute_units": 4,
            "active": True,
            "attested": False,
            "pools": [
                {"pool_id": loop_pool, "state": "left", "blacklisted": False},
                {"pool_id": market.pool_id, "state": "active", "blacklisted": False},
            ],
        },
        {"address": market.world.extra_node, "compute_units": 2, "active": False, "attested": True, "pools": []},
    ]
    assert ledger["nodes"] == sorted(expected_nodes, key=lambda n: n["address"])
    assert ledger["pending"] == [
        {
            "pool_id": market.pool_id,
            "submissions": 2,
            "work_units": 300,
            "reward_per_unit": REWARD_PER_UNIT,
            "reward": 300 * REWARD_PER_UNIT,
        }
    ]
    assert ledger["pending_rewards"] == 3 * TOKEN
    assert (ledger["slashes"], ledger["slashed_total"]) == ([], 0)


def test_status_shows_bobs_slash_with_its_reason_and_his_unbonding_release_time(cli, market):
    cast, loop = market.world.cast, market.world.loop
    bob = cast.bob.address
    amount, matures_at = market.client.stake_manager.unbonding(bob)
    assert amount == 3 * TOKEN
    release = datetime.fromtimestamp(matures_at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    status = json.loads(cli("provider", "status", bob.lower(), "--json"))

    assert (status["provider"], status["unbonding"], status["unbonding_matures_at"]) == (bob, amount, matures_at)
    assert status["unbonding_matures_at_utc"] == release and status["unbonding_withdrawable"] is False
    assert status["active_stake"] == market.client.stake_manager.active_stake(bob)
    (slash,) = status["ledger"]["slashes"]
    cheat_tx = next(e.tx_hash for e in loop.events if e.name == "SlashDistributed")
    assert slash == {
        "pool_id": loop.pool_id,
        "work_key": "0x" + loop.cheating_key.hex(),
        "node": cast.bob_node.address,
        "amount": 50 * TOKEN,
        "reason": "sampling_mismatch",
        "block_number": market.world.w3.eth.get_transaction(cheat_tx)["blockNumber"],
        "tx_hash": "0x" + cheat_tx.hex(),
    }
    assert status["ledger"]["slashed_total"] == 50 * TOKEN
    assert status["ledger"]["pending"] == [] and status["ledger"]["pending_rewards"] == 0
    (node,) = status["ledger"]["nodes"]
    assert node["pools"] == [{"pool_id": loop.pool_id, "state": "slashed", "blacklisted": False}]

    table = cli("provider", "status", bob)
    assert field(table, "unbonding") == f"3 POOL, withdrawable from {release} (unix {matures_at})"
    assert field(table, "slashes") == "1 (50 POOL)" and field(table, "pending rewards").startswith("0 POOL")
    assert "sampling_mismatch" in table and f"{loop.pool_id} (slashed)" in table
    assert "unavailable" not in table and "unpaid work" not in table


def test_status_table_for_people_shows_pending_and_withdrawable_rewards(cli, market):
    table = cli("provider", "status", market.world.cast.alice.address)
    assert field(table, "withdrawable rewards") == "3 POOL (`provider claim` pays them out)"
    assert field(table, "pending rewards") == "3 POOL (paid once accepted and finalized)"
    assert (field(table, "nodes"), field(table, "slashes")) == ("2", "0 (0 POOL)")
    assert "unpaid work" in table and f"1 (left), {market.pool_id} (active)" in table


def test_status_without_backend_prints_the_chain_part_and_one_line_why(cli, market):
    alice = market.world.cast.alice.address
    dead = "http://127.0.0.1:9"
    out = cli("provider", "status", alice, backend_url=dead)
    assert field(out, "active stake") == "200 POOL"
    (line,) = [line for line in out.splitlines() if "unavailable" in line]
    assert line == (
        "ledger part unavailable (nodes, pools, pending rewards, slashes): "
        f"backend not reachable at {dead} (ConnectError); is it running?"
    )
    status = json.loads(cli("provider", "status", alice, "--json", backend_url=dead))
    assert status["ledger"] is None and status["ledger_error"].startswith(f"backend not reachable at {dead}")
    assert status["withdrawable_rewards"] == 3 * TOKEN


def test_status_of_a_keystore_needs_no_password(cli, alice_keystore, market):
    status = json.loads(cli("provider", "status", "--key", str(alice_keystore), "--json"))
    assert status["provider"] == market.world.cast.alice.address
    refused = cli("provider", "status", "0x1234", fails=ProofpoolError)
    assert str(refused) == "not an address: '0x1234' (0x and 40 hex digits)"


def test_claim_pays_the_credited_rewards_and_reports_the_amount(cli, market, alice_keystore, chain_snapshot):
    alice, chain = market.world.cast.alice.address, market.client
    before = chain.token.balance_of(alice)
    out = cli("provider", "claim", "--key", str(alice_keystore), env={KEY_PASSWORD_ENV: PASSWORD})
    assert out.startswith(f"claimed 3 POOL to {alice}: tx 0x") and "RewardsWithdrawn" in out
    assert chain.token.balance_of(alice) - before == 3 * TOKEN
    assert chain.pool.reward_balance(alice) == 0

    again = cli(
        "provider", "claim", "--key", str(alice_keystore), env={KEY_PASSWORD_ENV: PASSWORD}, fails=ProofpoolError
    )
    assert str(again) == (f"nothing to claim: {alice} has no credited rewards (`provider status` shows pending work)")
    assert chain.token.balance_of(alice) - before == 3 * TOKEN


def test_claim_with_a_wrong_password_sends_nothing(cli, market, alice_keystore, chain_snapshot):
    block = market.world.w3.eth.block_number
    refused = cli("provider", "claim", "--key", str(alice_keystore), env={KEY_PASSWORD_ENV: "nope"}, fails=ConfigError)
    assert str(refused) == f"wrong password for keystore {alice_keystore}"
    missing = cli("provider", "claim", "--key", str(alice_keystore), fails=ConfigError)
    assert KEY_PASSWORD_ENV in str(missing)
    assert market.world.w3.eth.block_number == block
    assert market.client.pool.reward_balance(market.world.cast.alice.address) == 3 * TOKEN


def test_claim_with_a_hex_key_decodes_the_amount_from_the_event(cli, market, chain_snapshot):
    validator = market.world.cast.validator
    credited = market.client.pool.reward_balance(validator.address)
    assert credited == TOKEN // 2  # the validator fee of pool 3's finalized work
    out = cli("provider", "claim", "--key", "0x" + validator.key.hex().removeprefix("0x"))
    assert f"claimed 0.5 POOL to {validator.address}" in out
    assert market.client.pool.reward_balance(validator.address) == 0


def test_approve_pool_commits_at_most_the_chosen_stake_and_can_only_be_raised(
    cli, market, alice_keystore, chain_snapshot
):
    alice, chain = market.world.cast.alice.address, market.client
    key = ("--key", str(alice_keystore))
    env = {KEY_PASSWORD_ENV: PASSWORD}
    cast = market.world.cast
    admin = ChainClient.build(market.world.w3, market.world.book, cast.admin)
    pool_id, _ = admin.pool.create_pool(devnet_pool_params(cast, DISPUTE_WINDOW))  # slashes 50 POOL

    below = cli("provider", "approve-pool", str(pool_id), "--max-slash", "49", *key, env=env, fails=ProofpoolError)
    assert str(below) == f"pool {pool_id} slashes 50 POOL per invalid submission; --max-slash 49 is below it"
    out = cli("provider", "approve-pool", str(pool_id), "--max-slash", "120", *key, env=env)
    assert out.startswith(f"approved pool {pool_id}: your nodes may join; it may slash at most 120 POOL") and (
        "PoolApproved" in out
    )
    assert chain.pool.pool_approval(pool_id, alice) == PoolApproval(120 * TOKEN, 0, True)
    lower = cli("provider", "approve-pool", str(pool_id), "--max-slash", "60", *key, env=env, fails=ProofpoolError)
    assert "can be raised, never lowered" in str(lower)

    out = cli("provider", "revoke-pool", str(pool_id), *key, env=env)
    assert out.startswith(f"revoked your approval of pool {pool_id}") and "PoolApprovalRevoked" in out
    assert chain.pool.pool_approval(pool_id, alice) == PoolApproval(120 * TOKEN, 0, False)
    again = cli("provider", "revoke-pool", str(pool_id), *key, env=env, fails=ProofpoolError)
    assert str(again) == f"you have not approved pool {pool_id}"


def test_withdraw_waits_for_open_work_and_finalize_settles_it(cli, market, alice_keystore, chain_snapshot):
    """Alice's node has one pending and one accepted submission: her matured unbonding stays bonded
    until both are settled; `provider finalize` settles the accepted one once its window passed, and
    the pending one once its pool closed and wound up."""
    alice, chain, anvil = market.world.cast.alice.address, market.client, market.world.anvil
    key, env = ("--key", str(alice_keystore)), {KEY_PASSWORD_ENV: PASSWORD}
    assert chain.pool.open_work(alice) == 2
    cli("provider", "unbond", "10", *key, env=env)
    anvil.rpc("evm_increaseTime", [chain.stake_manager.unbonding_period() + 1])
    anvil.rpc("evm_mine")
    refused = cli("provider", "withdraw", *key, env=env, fails=ProofpoolError)
    assert str(refused).startswith("2 submission(s) of your nodes are still pending or inside their dispute window")

    out = cli("provider", "finalize", "--pool", str(market.pool_id), "--backend-url", market.backend_url, *key, env=env)
    assert f"finalized 1 submission(s) in pool {market.pool_id}" in out and "WorkFinalized" in out
    assert chain.pool.open_work(alice) == 1
    out = cli("provider", "finalize", "--backend-url", market.backend_url, *key, env=env)
    assert out.startswith("nothing to finalize (0 accepted submission(s) still inside their dispute window)")

    # The pool closes with the pending file never judged: after the wind-up, `finalize` expires it
    # and the stake is free.
    market.client.as_account(market.world.cast.manager).pool.close_pool(market.pool_id)
    anvil.rpc("evm_increaseTime", [DISPUTE_WINDOW])
    anvil.rpc("evm_mine")
    out = cli("provider", "finalize", "--backend-url", market.backend_url, *key, env=env)
    assert f"expired 1 unjudged submission(s) of closed pool {market.pool_id}" in " ".join(out.split())
    assert chain.pool.open_work(alice) == 0
    assert "withdrew unbonded stake" in cli("provider", "withdraw", *key, env=env)

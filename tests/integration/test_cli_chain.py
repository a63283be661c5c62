"""The chain commands of the `proofpool` CLI against a real anvil, as a provider and a
pool creator would type them."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from eth_account import Account

from proofpool.infra.chain.anvil import ANVIL_KEYS
from proofpool.infra.chain.units import TOKEN

ADMIN, PROVIDER, NODE = ANVIL_KEYS[0], ANVIL_KEYS[4], ANVIL_KEYS[6]


def test_provider_and_pool_commands_walk_the_join_flow(cli, tmp_path):
    provider = Account.from_key(PROVIDER).address
    node = Account.from_key(NODE).address
    cli("contracts", "deploy", "--key", ADMIN)
    assert json.loads(cli("contracts", "show", "--json").output)["deployer"] == Account.from_key(ADMIN).address
    cli("contracts", "mint", provider, "1000", "--key", ADMIN)
    cli("contracts", "mint", Account.from_key(ADMIN).address, "1000", "--key", ADMIN)
    cli("provider", "register", "--key", PROVIDER)
    cli("provider", "stake", "250.5", "--key", PROVIDER)
    proof = json.loads(cli("provider", "sign-node", "--node-key", NODE, "--provider", provider).output)
    assert (proof["node"], proof["provider"]) == (node, provider)
    signed = ("--node", node, "--signature", proof["signature"], "--deadline", str(proof["deadline"]))
    out = cli("provider", "add-node", *signed, "--compute-units", "4", "--key", PROVIDER).output
    assert f"added node {node}" in out and "NodeAdded" in out
    cli("pool", "create", "--fund", "100", "--start", "--key", ADMIN)
    invite_file = tmp_path / "invite.json"
    cli("pool", "invite", "1", node, "--out", str(invite_file), "--key", ADMIN)
    unapproved = cli("provider", "join", str(invite_file), "--key", PROVIDER, fails=True)
    assert unapproved.name == "ComputePoolNotApproved"
    cli("provider", "approve-pool", "1", "--max-slash", "250.5", "--key", PROVIDER)
    assert "NodeJoined" in cli("provider", "join", str(invite_file), "--key", PROVIDER).output

    status = json.loads(cli("provider", "status", provider, "--json").output)
    assert status["active_stake"] == 250_500_000_000_000_000_000
    assert status["compute_units"] == 4
    assert int(status["required_stake"]) == 140 * TOKEN

    cli("pool", "anchor-checkpoint", "1", "1", "ab" * 32, "s3://bucket/ckpt/1/", "--key", ADMIN)
    pool = json.loads(cli("pool", "status", "1", "--json").output)
    assert pool["status"] == "ACTIVE"
    assert int(pool["budget"]) == 100 * TOKEN
    assert pool["latest_checkpoint"]["version"] == 1

    cli("provider", "unbond", "100", "--key", PROVIDER)
    early = cli("provider", "withdraw", "--key", PROVIDER, fails=True)
    assert early.name == "StakeManagerUnbondingNotMatured"


def _staked_provider(cli) -> tuple[str, str]:
    """Contracts deployed; the provider registered with 200 POOL staked. (provider, node) addresses."""
    provider = Account.from_key(PROVIDER).address
    cli("contracts", "deploy", "--key", ADMIN)
    cli("contracts", "mint", provider, "1000", "--key", ADMIN)
    cli("provider", "register", "--key", PROVIDER)
    cli("provider", "stake", "200", "--key", PROVIDER)
    return provider, Account.from_key(NODE).address


def test_a_node_signature_is_refused_after_its_deadline(cli, anvil):
    provider, node = _staked_provider(cli)
    proof = json.loads(cli("provider", "sign-node", "--node-key", NODE, "--provider", provider, "--ttl", "60").output)
    anvil.rpc("evm_increaseTime", [61])
    anvil.rpc("evm_mine")
    signed = ("--node", node, "--signature", proof["signature"], "--deadline", str(proof["deadline"]))
    expired = cli("provider", "add-node", *signed, "--key", PROVIDER, fails=True)
    assert expired.name == "ComputeRegistryNodeSignatureExpired"
    missing = cli(
        "provider", "add-node", "--node", node, "--signature", proof["signature"], "--key", PROVIDER, fails=True
    )
    assert "--deadline" in str(missing)


def test_reused_invite_is_refused_by_name(cli, tmp_path):
    _, node = _staked_provider(cli)
    cli("provider", "add-node", "--node-key", NODE, "--key", PROVIDER)
    cli("pool", "create", "--start", "--key", ADMIN)
    cli("provider", "approve-pool", "1", "--max-slash", "200", "--key", PROVIDER)
    invite_file = tmp_path / "invite.json"
    cli("pool", "invite", "1", node, "--out", str(invite_file), "--nonce", "7", "--key", ADMIN)
    cli("provider", "join", str(invite_file), "--key", PROVIDER)
    again = cli("provider", "join", str(invite_file), "--key", PROVIDER, fails=True)
    assert again.name == "ComputePoolInviteAlreadyUsed"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("provider", "stake", "abc", "--key", PROVIDER), "not a token amount"),
        (("provider", "stake", "--key", PROVIDER, "--", "-5"), "non-negative"),
        (("provider", "register", "--key", "0x1234"), "not a valid 32-byte hex private key"),
        (("pool", "status", "99"), "no pool 99"),
    ],
)
def test_bad_input_gets_a_clear_error(cli, args, message):
    cli("contracts", "deploy", "--key", ADMIN)
    assert message in str(cli(*args, fails=True))


def test_errors_print_one_line_and_exit_1(anvil, tmp_path):
    env = {"PROOFPOOL_RPC_URL": anvil.url, "PROOFPOOL_DEPLOYMENTS_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-m", "proofpool.cli.main", "pool", "status", "1"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.strip().startswith("error: no deployment for chain 31337")
    assert "Traceback" not in done.stderr


def test_a_pool_with_a_challenge_window_closes_and_refunds_its_budget(cli, anvil):
    """`pool create --challenge-window`, `pool status`, `validator stake`, `pool close`, `pool refund`."""
    admin = Account.from_key(ADMIN).address
    validator = Account.from_key(ANVIL_KEYS[3])
    cli("contracts", "deploy", "--key", ADMIN)
    cli("contracts", "mint", admin, "1000", "--key", ADMIN)
    cli("contracts", "mint", validator.address, "500", "--key", ADMIN)
    out = " ".join(cli("validator", "stake", "100", "--key", validator.key.hex()).output.split())
    assert "a verdict needs 100 POOL" in out and "an overturned verdict costs 50 POOL" in out
    args = ("--challenge-window", "600", "--contest-quorum", "2", "--dispute-window", "60")
    cli("pool", "create", *args, "--fund", "100", "--start", "--key", ADMIN)
    pool = json.loads(cli("pool", "status", "1", "--json").output)
    assert (pool["challenge_window"], pool["contest_quorum"], pool["dispute_window"]) == (600, 2, 60)
    too_long = cli("pool", "create", "--challenge-window", str(7 * 24 * 3600), "--key", ADMIN, fails=True)
    assert too_long.name == "ComputePoolInvalidChallengeRules"

    assert "not closed" in str(cli("pool", "refund", "1", "--key", ADMIN, fails=True))
    assert "wind-up until unix time" in " ".join(cli("pool", "close", "1", "--key", ADMIN).output.split())
    assert "winds up until unix time" in str(cli("pool", "refund", "1", "--key", ADMIN, fails=True))
    anvil.rpc("evm_increaseTime", [60])
    anvil.rpc("evm_mine")
    assert "refunded 100 POOL of pool 1" in " ".join(cli("pool", "refund", "1", "--key", ADMIN).output.split())
    assert int(json.loads(cli("pool", "status", "1", "--json").output)["budget"]) == 0

    cli("contracts", "validator-stake", "200", "80", "--key", ADMIN)
    out = " ".join(cli("validator", "stake", "100", "--key", validator.key.hex()).output.split())
    assert "active stake 200 POOL; a verdict needs 200 POOL, an overturned verdict costs 80 POOL" in out
    refused = cli("contracts", "validator-stake", "10", "80", "--key", ADMIN, fails=True)
    assert refused.name == "ComputePoolInvalidValidatorSlash"
    assert int(json.loads(cli("pool", "status", "1", "--json").output)["budget"]) == 0

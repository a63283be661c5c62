"""ETH for gas through the `proofpool` CLI on a real anvil: `chain fund` (and its refusal on a chain
that is not the devnet), the one-line error a fresh key gets from every sending command, `pool
create --fund --start` refusing before its first transaction, and the validator's gas check and
balance."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from eth_account import Account
from eth_account.signers.local import LocalAccount
from proofpool.cli.main import app
from typer.testing import CliRunner

from proofpool.infra.chain.anvil import ANVIL_KEYS, AnvilProcess, free_port, start_anvil
from proofpool.infra.chain.client import ChainClient
from proofpool.infra.chain.errors import InsufficientGas
from proofpool.infra.chain.rpc import connect
from proofpool.infra.chain.units import WEI_PER_ETH
from proofpool.infra.config import get_settings

pytestmark = pytest.mark.timeout(180)

ADMIN = ANVIL_KEYS[0]
DEAD = f"127.0.0.1:{free_port()}"
"""Where no service answers: the validator commands' database, ledger and broker."""


def _balance(anvil: AnvilProcess, address: str) -> int:
    return connect(anvil.url).eth.get_balance(address)


def _set_balance(anvil: AnvilProcess, address: str, wei: int) -> None:
    anvil.rpc("anvil_setBalance", [address, hex(wei)])


def _nonce(anvil: AnvilProcess, address: str) -> int:
    return connect(anvil.url).eth.get_transaction_count(address)


def _pool_count() -> int:
    """Pools on the chain of the deployment the CLI uses."""
    return ChainClient.from_settings().pool.pool_count()


def test_chain_up_says_where_the_funded_accounts_are(cli):
    out = " ".join(cli("chain", "up", "--port", str(free_port()), "--detach").output.split())
    try:
        assert (
            "funded development accounts: anvil's 20 well-known keys (10,000 ETH each); first: "
            f"{Account.from_key(ADMIN).address} key {ADMIN}; `proofpool chain fund ADDRESS` sends ETH to any other"
        ) in out
    finally:
        cli("chain", "down")


def test_chain_fund_adds_eth_and_prints_the_new_balance(cli, anvil):
    fresh = Account.create().address
    assert f"{fresh} now has 2.5 ETH" in cli("chain", "fund", fresh, "2.5").output
    assert f"{fresh} now has 102.5 ETH" in cli("chain", "fund", fresh).output  # default: 100 more
    assert _balance(anvil, fresh) == 1025 * WEI_PER_ETH // 10
    assert "not an address" in str(cli("chain", "fund", "0x1234", fails=True))


def test_chain_fund_refuses_a_chain_that_is_not_the_devnet(cli):
    fresh = Account.create().address
    with start_anvil(chain_id=1337) as other:
        refused = cli("chain", "fund", fresh, "--rpc-url", other.url, fails=True)
        assert str(refused).startswith("chain 1337 is not the devnet (chain id 31337)")
        assert _balance(other, fresh) == 0


def test_a_fresh_key_gets_one_line_naming_its_address_and_the_faucet(cli, anvil, tmp_path):
    fresh = Account.create()
    deploy = cli("contracts", "deploy", "--key", fresh.key.hex(), fails=True)
    assert isinstance(deploy, InsufficientGas) and deploy.balance == 0
    cli("contracts", "deploy", "--key", ADMIN)

    env = {
        "PATH": os.environ["PATH"],
        "PROOFPOOL_RPC_URL": anvil.url,
        "PROOFPOOL_DEPLOYMENTS_DIR": str(tmp_path / "deployments"),
        "PROOFPOOL_STATE_DIR": str(tmp_path / "state"),
        "COLUMNS": "1000",  # rich wraps at the terminal width: one line must mean one message
    }
    done = subprocess.run(
        [sys.executable, "-m", "proofpool.cli.main", "provider", "register", "--key", fresh.key.hex()],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=120,
    )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"error: {fresh.address} has 0 ETH for gas (this transaction needs about 0.0")
    assert line.endswith(f" ETH): send it some (devnet: proofpool chain fund {fresh.address})")

    cli("chain", "fund", fresh.address, "1")
    assert "ProviderRegistered" in cli("provider", "register", "--key", fresh.key.hex()).output


def _creator_with(cli, anvil, pool: str | None, eth: int) -> LocalAccount:
    """A fresh key holding `pool` POOL (minted by the admin) and `eth` wei; contracts deployed."""
    creator = Account.create()
    cli("contracts", "deploy", "--key", ADMIN)
    if pool is not None:
        cli("contracts", "mint", creator.address, pool, "--key", ADMIN)
    _set_balance(anvil, creator.address, eth)
    return creator


def test_pool_create_without_pool_refuses_before_any_transaction(cli, anvil):
    creator = _creator_with(cli, anvil, None, 10 * WEI_PER_ETH)
    refused = cli("pool", "create", "--fund", "10000", "--start", "--key", creator.key.hex(), fails=True)
    assert str(refused) == f"{creator.address} holds 0 POOL; --fund 10000 needs 10000 POOL"
    assert _nonce(anvil, creator.address) == 0
    assert _pool_count() == 0


def test_pool_create_without_gas_for_every_step_refuses_before_any_transaction(cli, anvil):
    creator = _creator_with(cli, anvil, "10000", WEI_PER_ETH // 10_000)  # enough for createPool alone
    refused = cli("pool", "create", "--fund", "10000", "--start", "--key", creator.key.hex(), fails=True)
    assert isinstance(refused, InsufficientGas)
    need = "(this pool create sends 4 transactions, about 0.0"
    assert str(refused).startswith(f"{creator.address} has 0.0001 ETH for gas {need}")
    assert (_nonce(anvil, creator.address), _pool_count()) == (0, 0)

    _set_balance(anvil, creator.address, WEI_PER_ETH)
    cli("pool", "create", "--fund", "10000", "--start", "--key", creator.key.hex())
    pool = cli("pool", "status", "1").output
    assert "ACTIVE" in pool and "10000 POOL" in pool


def test_pool_fund_shows_a_shortfall_in_pool(cli, anvil):
    creator = _creator_with(cli, anvil, "5.5", WEI_PER_ETH)
    cli("pool", "create", "--key", creator.key.hex())
    refused = cli("pool", "fund", "1", "10", "--key", creator.key.hex(), fails=True)
    assert str(refused) == f"{creator.address} holds 5.5 POOL; funding pool 1 needs 10 POOL"
    assert "--fund must be more than 0" in str(cli("pool", "create", "--fund", "0", "--key", ADMIN, fails=True))


@pytest.fixture
def validator(cli, anvil, monkeypatch) -> LocalAccount:
    """A staked validator with VALIDATOR_ROLE, on a stack whose database, ledger and broker are down
    (so `validator run` stops at its service check, after the gas check)."""
    monkeypatch.setenv("DATABASE_URL", f"postgresql://proofpool@{DEAD}/proofpool")
    monkeypatch.setenv("REDIS_URL", f"redis://{DEAD}/0")
    monkeypatch.setenv("PROOFPOOL_BACKEND_URL", f"http://{DEAD}")
    get_settings.cache_clear()
    account = Account.from_key(ANVIL_KEYS[3])
    cli("contracts", "deploy", "--key", ADMIN)
    cli("contracts", "grant", "VALIDATOR_ROLE", account.address, "--key", ADMIN)
    cli("contracts", "mint", account.address, "100", "--key", ADMIN)
    cli("validator", "stake", "100", "--key", ANVIL_KEYS[3])
    return account


def test_validator_run_refuses_a_key_under_the_gas_minimum(cli, anvil, validator, monkeypatch):
    _set_balance(anvil, validator.address, WEI_PER_ETH // 1000)
    refused = cli("validator", "run", "--key", ANVIL_KEYS[3], fails=True)
    assert isinstance(refused, InsufficientGas)
    assert str(refused) == (
        f"{validator.address} has 0.001 ETH for gas (a validator needs at least 0.01 ETH, "
        f"PROOFPOOL_VALIDATOR_MIN_GAS_ETH): send it some (devnet: proofpool chain fund {validator.address})"
    )

    _set_balance(anvil, validator.address, WEI_PER_ETH // 20)  # above the minimum, under 10x
    result = CliRunner().invoke(app, ["validator", "run", "--key", ANVIL_KEYS[3]])
    assert "PostgreSQL" in str(result.exception)  # got past the gas check, to the services
    warning = f"warning: {validator.address} has 0.05 ETH for gas: under 10x the 0.01 ETH minimum; top it up"
    assert warning in result.output

    monkeypatch.setenv("PROOFPOOL_VALIDATOR_MIN_GAS_ETH", "0")  # the check off
    get_settings.cache_clear()
    _set_balance(anvil, validator.address, 0)
    result = CliRunner().invoke(app, ["validator", "run", "--key", ANVIL_KEYS[3]])
    assert "PostgreSQL" in str(result.exception)
    assert "has 0 ETH for gas: no transaction can be sent" in result.output


def test_validator_status_shows_the_eth_balance(cli, anvil, validator):
    _set_balance(anvil, validator.address, WEI_PER_ETH // 1000)
    out = " ".join(cli("validator", "status", validator.address).output.split())
    assert "eth_balance 0.001 ETH" in out
    assert "gas_warning under the 0.01 ETH minimum" in out

"""On a chain that is not the devnet (anvil started with another chain id), the devnet's
conveniences are refused: the deployer faucet, an allowlist-free indexer, devnet credentials."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from eth_account import Account
from proofpool.cli.main import app
from typer.testing import CliRunner

from proofpool.core.errors import ConfigError
from proofpool.infra.chain.anvil import AnvilProcess, start_anvil
from proofpool.infra.chain.artifacts import load_artifact
from proofpool.infra.chain.deploy import DeployParams, deploy_contracts, write_address_book
from proofpool.infra.chain.rpc import connect
from proofpool.infra.chain.tx import TxSender
from proofpool.infra.config import get_settings

CHAIN_ID = 1337


@pytest.fixture(scope="module")
def chain() -> Iterator[AnvilProcess]:
    with start_anvil(chain_id=CHAIN_ID) as anvil:
        yield anvil


def _deployer(chain: AnvilProcess) -> tuple:
    """A fresh key funded from anvil's first account (anvil's keys themselves stand for devnets)."""
    from proofpool.infra.chain.anvil import ANVIL_KEYS

    w3 = connect(chain.url)
    me = Account.create()
    TxSender(w3, Account.from_key(ANVIL_KEYS[0])).transfer_eth(me.address, 10**19)
    return w3, me


def test_a_faucet_is_refused_and_the_cli_deploys_without_one(chain, tmp_path, monkeypatch) -> None:
    w3, me = _deployer(chain)
    with pytest.raises(ConfigError, match=r"a faucet .* exists only on chain 31337"):
        deploy_contracts(w3, TxSender(w3, me), DeployParams())
    monkeypatch.setenv("PROOFPOOL_DEPLOYMENTS_DIR", str(tmp_path))
    get_settings.cache_clear()
    try:
        key = "0x" + me.key.hex().removeprefix("0x")
        result = CliRunner().invoke(app, ["contracts", "deploy", "--key", key, "--rpc-url", chain.url])
        assert result.exit_code == 0, result.output
        refused = CliRunner().invoke(app, ["contracts", "deploy", "--faucet", "--key", key, "--rpc-url", chain.url])
        assert isinstance(refused.exception, ConfigError)
    finally:
        get_settings.cache_clear()
    book = deploy_contracts(w3, TxSender(w3, me), DeployParams(admin_is_minter=False))
    token = w3.eth.contract(address=book.pool_token, abi=load_artifact("PoolToken").abi)
    assert not token.functions.hasRole(w3.keccak(text="MINTER_ROLE"), me.address).call()


def test_the_indexer_needs_an_allowlist_off_the_devnet(chain, tmp_path, monkeypatch) -> None:
    w3, me = _deployer(chain)
    book = deploy_contracts(w3, TxSender(w3, me), DeployParams(admin_is_minter=False))
    write_address_book(book, tmp_path)
    monkeypatch.setenv("PROOFPOOL_DEPLOYMENTS_DIR", str(tmp_path))
    monkeypatch.setenv("PROOFPOOL_RPC_URL", chain.url)
    get_settings.cache_clear()
    try:
        from proofpool.backend.indexer.follow import setup_indexer

        with pytest.raises(ConfigError, match="PROOFPOOL_SERVED_POOLS"):
            setup_indexer(get_settings(), dispatch=False)
        monkeypatch.setenv("PROOFPOOL_SERVED_POOLS", "1")
        get_settings.cache_clear()
        indexer = setup_indexer(get_settings(), dispatch=False)
        assert indexer.options.served.describe() == "pools 1"
    finally:
        get_settings.cache_clear()

"""`proofpool contracts`: compile and deploy."""

from __future__ import annotations

import typer
from proofpool.cli.common import JsonOption, KeyOption, RpcOption, console, print_json, report_tx, signer_client

from proofpool.core.errors import ProofpoolError
from proofpool.infra.chain.accounts import load_account
from proofpool.infra.chain.deploy import (
    DeployParams,
    deploy_contracts,
    grant_role,
    load_address_book,
    write_address_book,
)
from proofpool.infra.chain.networks import DEVNET_CHAIN_ID
from proofpool.infra.chain.rpc import connect
from proofpool.infra.chain.tx import TxSender
from proofpool.infra.chain.units import parse_pool
from proofpool.infra.config import get_settings

app = typer.Typer(no_args_is_help=True)


@app.command()
def build() -> None:
    """Compile the Solidity sources (same as `make contracts`)."""
    from proofpool.infra.chain.compile import compile_contracts

    out = compile_contracts()
    console.print(f"compiled contracts into {out}")


@app.command()
def deploy(
    key: KeyOption = None,
    rpc_url: RpcOption = None,
    unbonding_days: float = typer.Option(7.0, help="Unbonding period in days (must exceed every dispute window)."),
    min_stake: str = typer.Option("100", help="Base stake (POOL) a provider with compute units must keep."),
    stake_per_unit: str = typer.Option("10", help="Extra stake (POOL) per registered compute unit."),
    min_validator_stake: str = typer.Option("100", help="Stake (POOL) a validator needs for any verdict."),
    validator_slash: str = typer.Option(
        "50", help="Stake (POOL) a validator loses per overturned verdict; at most --min-validator-stake."
    ),
    faucet: bool | None = typer.Option(
        None,
        "--faucet/--no-faucet",
        help="Make the deployer a token minter (the devnet faucet). Default: on the devnet chain (31337) "
        "only; refused on any other chain.",
    ),
) -> None:
    """Deploy PoolToken, StakeManager, ComputeRegistry and ComputePool, and write the address book."""
    settings = get_settings()
    w3 = connect(rpc_url or settings.rpc_url, timeout=settings.rpc_timeout)
    params = DeployParams(
        unbonding_period=int(unbonding_days * 86400),
        min_stake=parse_pool(min_stake),
        stake_per_compute_unit=parse_pool(stake_per_unit),
        min_validator_stake=parse_pool(min_validator_stake),
        validator_slash_amount=parse_pool(validator_slash),
        admin_is_minter=w3.eth.chain_id == DEVNET_CHAIN_ID if faucet is None else faucet,
    )
    book = deploy_contracts(w3, TxSender(w3, load_account(key)), params)
    path = write_address_book(book, settings.deployments_dir)
    for name, address in book.addresses.items():
        console.print(f"{name:16} {address}")
    console.print(f"address book written to {path}")


@app.command("validator-stake")
def validator_stake(
    minimum: str = typer.Argument(..., help="Stake (POOL) a validator needs for any verdict (0: none)."),
    slash: str = typer.Argument(..., help="Stake (POOL) a validator loses per overturned verdict (<= MINIMUM)."),
    key: KeyOption = None,
    rpc_url: RpcOption = None,
) -> None:
    """Set what validators stake and what an overturned verdict costs them (admin key only)."""
    client = signer_client(key, rpc_url)
    receipt = client.pool.set_validator_stake_params(parse_pool(minimum), parse_pool(slash))
    report_tx(client, f"validators need {minimum} POOL staked; an overturned verdict costs {slash} POOL", receipt)


@app.command()
def grant(
    role: str = typer.Argument(..., help="MINTER_ROLE, ATTESTER_ROLE or VALIDATOR_ROLE."),
    account: str = typer.Argument(..., help="Address that receives the role."),
    key: KeyOption = None,
    rpc_url: RpcOption = None,
) -> None:
    """Grant a role (admin key only), e.g. VALIDATOR_ROLE to a validator's address."""
    if role not in ("MINTER_ROLE", "ATTESTER_ROLE", "VALIDATOR_ROLE", "SLASHER_ROLE"):
        raise ProofpoolError(f"unknown role {role!r}")
    settings = get_settings()
    w3 = connect(rpc_url or settings.rpc_url, timeout=settings.rpc_timeout)
    book = load_address_book(w3.eth.chain_id, settings.deployments_dir)
    receipt = grant_role(w3, TxSender(w3, load_account(key)), book, role, account)  # type: ignore[arg-type]
    console.print(f"{role} granted to {account} in tx 0x{receipt['transactionHash'].hex()}")


@app.command()
def show(rpc_url: RpcOption = None, as_json: JsonOption = False) -> None:
    """Print the address book of the connected chain."""
    settings = get_settings()
    w3 = connect(rpc_url or settings.rpc_url, timeout=settings.rpc_timeout)
    book = load_address_book(w3.eth.chain_id, settings.deployments_dir)
    if as_json:
        print_json(book.to_json())
        return
    console.print(f"chain {book.chain_id}, deployed from block {book.deploy_block} by {book.deployer}")
    for name, address in book.addresses.items():
        console.print(f"{name:16} {address}")


@app.command()
def mint(
    to: str = typer.Argument(..., help="Address that receives the tokens."),
    amount: str = typer.Argument(..., help="POOL tokens, e.g. 1000."),
    key: KeyOption = None,
    rpc_url: RpcOption = None,
) -> None:
    """Devnet faucet: mint POOL tokens (needs MINTER_ROLE)."""
    from proofpool.cli.common import report_tx, signer_client

    client = signer_client(key, rpc_url)
    report_tx(client, f"minted {amount} POOL to {to}", client.token.mint(to, parse_pool(amount)))

"""`proofpool provider`: what a compute provider does on-chain, and where it stands.

`status` joins two sources: stake, unbonding and withdrawable rewards are read from the chain
now; nodes, pool memberships, work waiting for its payout and slashes come from the backend's
public ledger (docs/ledger.md), which is as fresh as its indexer. Without a backend the chain
part is still shown.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import typer
from eth_utils import is_address, to_checksum_address
from proofpool.cli.common import (
    JsonOption,
    KeyOption,
    RpcOption,
    console,
    print_json,
    reader_client,
    report_tx,
    signer_client,
)
from proofpool.cli.ledger import BackendOption
from rich.console import Group, RenderableType
from rich.table import Table
from web3.types import TxReceipt

from proofpool.core.errors import ProofpoolError
from proofpool.infra.chain.accounts import account_address, load_account
from proofpool.infra.chain.bindings import WorkStatus
from proofpool.infra.chain.client import ChainClient
from proofpool.infra.chain.errors import ContractRevert
from proofpool.infra.chain.signing import Invite, NodeOwnership
from proofpool.infra.chain.units import format_pool, parse_pool
from proofpool.infra.config import get_settings
from proofpool.infra.http.ledger_client import LedgerClient
from proofpool.infra.standing import (
    ChainStanding,
    LedgerStanding,
    read_chain_standing,
    read_ledger_standing,
)

app = typer.Typer(no_args_is_help=True)


@app.command()
def register(key: KeyOption = None, rpc_url: RpcOption = None) -> None:
    """Register the key's address as a compute provider."""
    client = signer_client(key, rpc_url)
    report_tx(client, f"registered provider {client.address}", client.registry.register_provider())


@app.command()
def stake(
    amount: str = typer.Argument(..., help="POOL tokens, e.g. 250.5"),
    key: KeyOption = None,
    rpc_url: RpcOption = None,
) -> None:
    """Stake tokens so your nodes may join pools (approves the StakeManager first if needed)."""
    stake_tokens(signer_client(key, rpc_url), amount)


def stake_tokens(client: ChainClient, amount: str) -> None:
    """Stake `amount` POOL from the client's key, approving the StakeManager first if needed."""
    units = parse_pool(amount)
    approval = client.token.ensure_allowance(client.stake_manager.address, units)
    if approval is not None:
        report_tx(client, "approved the StakeManager", approval)
    report_tx(client, f"staked {amount} POOL", client.stake_manager.stake(units))


@app.command()
def unbond(
    amount: str = typer.Argument(..., help="POOL tokens to move from active stake to unbonding."),
    key: KeyOption = None,
    rpc_url: RpcOption = None,
) -> None:
    """Start unbonding stake: withdrawable after the unbonding period, slashable until then."""
    client = signer_client(key, rpc_url)
    receipt = client.stake_manager.unbond(parse_pool(amount))
    _, matures_at = client.stake_manager.unbonding(client.address)
    report_tx(client, f"unbonding {amount} POOL, withdrawable from unix time {matures_at}", receipt)


@app.command()
def withdraw(key: KeyOption = None, rpc_url: RpcOption = None) -> None:
    """Withdraw matured unbonded stake (refused while your nodes have open work: a verdict can
    still slash the stake behind it)."""
    client = signer_client(key, rpc_url)
    try:
        receipt = client.stake_manager.withdraw()
    except ContractRevert as revert:
        if revert.name != "StakeManagerOpenWork":
            raise
        open_work = client.pool.open_work(client.address)
        raise ProofpoolError(
            f"{open_work} submission(s) of your nodes are still pending or inside their dispute window; "
            "the stake behind them stays bonded until they are judged and finalized "
            "(`proofpool provider finalize` once their dispute window has passed)"
        ) from revert
    report_tx(client, "withdrew unbonded stake", receipt)


FINALIZE_BATCH = 50
"""Work keys per `finalizeWork` transaction."""


@app.command()
def finalize(
    pool_id: int | None = typer.Option(None, "--pool", help="Only this pool (default: every pool)."),
    key: KeyOption = None,
    rpc_url: RpcOption = None,
    backend_url: BackendOption = None,
) -> None:
    """Settle your nodes' accepted work whose dispute window has passed: credits the rewards and
    releases the stake behind it (stake with open work cannot be withdrawn). Pending work of a closed
    pool that nobody judged before its wind-up ended is expired (no pay, no slash), which releases
    its stake too. Anyone may settle anyone's work; this finds yours through the backend's ledger
    and checks each key on-chain."""
    client = signer_client(key, rpc_url)
    filters: dict[str, object] = {"provider": client.address, "status": "accepted"}
    if pool_id is not None:
        filters["pool_id"] = pool_id
    with LedgerClient(backend_url or get_settings().backend_url, timeout=10.0) as ledger:
        rows = ledger.items("submissions", filters)
        unjudged = ledger.items("submissions", {**filters, "status": "pending"})
    now = client.w3.eth.get_block("latest")["timestamp"]
    _expire_unjudged(client, unjudged, now)
    due: dict[int, list[bytes]] = {}
    waiting = 0
    windows: dict[int, int] = {}
    for row in rows:
        pool = int(row["pool_id"])
        work_key = bytes.fromhex(str(row["work_key"]).removeprefix("0x"))
        work = client.pool.get_work(pool, work_key)
        if work.status is not WorkStatus.ACCEPTED:
            continue  # the ledger lags the chain: already finalized or invalidated
        if pool not in windows:
            windows[pool] = client.pool.get_pool(pool).dispute_window
        if work.status_since + windows[pool] <= now:
            due.setdefault(pool, []).append(work_key)
        else:
            waiting += 1
    if not due:
        console.print(f"nothing to finalize ({waiting} accepted submission(s) still inside their dispute window)")
        return
    _send_batches(client, due, client.pool.finalize_work, "finalized {n} submission(s) in pool {pool}")
    if waiting:
        console.print(f"{waiting} accepted submission(s) still inside their dispute window")


def _expire_unjudged(client: ChainClient, rows: list[dict[str, Any]], now: int) -> None:
    """Expire the Pending keys among `rows` whose closed pool's wind-up is over."""
    due: dict[int, list[bytes]] = {}
    wind_up: dict[int, int] = {}
    for row in rows:
        pool = int(row["pool_id"])
        if pool not in wind_up:
            wind_up[pool] = client.pool.budget_reserved(pool)[1]  # 0 while the pool is not closed
        if not 0 < wind_up[pool] <= now:
            continue
        work_key = bytes.fromhex(str(row["work_key"]).removeprefix("0x"))
        if client.pool.get_work(pool, work_key).status is WorkStatus.PENDING:
            due.setdefault(pool, []).append(work_key)
    _send_batches(client, due, client.pool.expire_work, "expired {n} unjudged submission(s) of closed pool {pool}")


def _send_batches(
    client: ChainClient,
    due: dict[int, list[bytes]],
    send: Callable[[int, list[bytes]], TxReceipt],
    said: str,
) -> None:
    """Send each pool's keys `FINALIZE_BATCH` at a time and report each transaction (`said` names
    `{n}` keys and the `{pool}`)."""
    for pool, keys in sorted(due.items()):
        for start in range(0, len(keys), FINALIZE_BATCH):
            batch = keys[start : start + FINALIZE_BATCH]
            report_tx(client, said.format(n=len(batch), pool=pool), send(pool, batch))


@app.command("approve-pool")
def approve_pool(
    pool_id: int = typer.Argument(..., help="The pool your nodes may join."),
    max_slash: str = typer.Option(
        ...,
        help="POOL tokens: the most this pool may slash from your stake in total, over all your nodes "
        "and verdicts. At least the pool's slash per invalid submission.",
    ),
    key: KeyOption = None,
    rpc_url: RpcOption = None,
) -> None:
    """Let your nodes join a pool and cap what it can take from your stake.

    A node key can join only pools its provider approved, so a stolen node key cannot commit your
    stake to a pool of the thief's making. Check the pool's terms first (`proofpool pool show`):
    its slash per invalid submission, its treasury and the validators' share of slashes.
    """
    client = signer_client(key, rpc_url)
    pool = client.pool.get_pool(pool_id)
    if pool.creator == "0x" + "0" * 40:
        raise ProofpoolError(f"pool {pool_id} does not exist")
    units = parse_pool(max_slash)
    if units < pool.slash_amount:
        raise ProofpoolError(
            f"pool {pool_id} slashes {format_pool(pool.slash_amount)} POOL per invalid submission; "
            f"--max-slash {max_slash} is below it"
        )
    current = client.pool.pool_approval(pool_id, client.address)
    if units < current.max_slash:
        raise ProofpoolError(
            f"you already approved up to {format_pool(current.max_slash)} POOL for pool {pool_id}; "
            "a maximum can be raised, never lowered (submitted work counts on it)"
        )
    receipt = client.pool.approve_pool(pool_id, units)
    report_tx(
        client,
        f"approved pool {pool_id}: your nodes may join; it may slash at most {max_slash} POOL of your stake "
        f"(per invalid submission {format_pool(pool.slash_amount)} POOL, treasury {pool.treasury})",
        receipt,
    )


@app.command("revoke-pool")
def revoke_pool(
    pool_id: int = typer.Argument(..., help="A pool you approved."),
    key: KeyOption = None,
    rpc_url: RpcOption = None,
) -> None:
    """Stop your nodes from joining a pool. Nodes already in it stay members until they leave
    (`leavePool`) or you remove them from the registry; work already submitted stays slashable up
    to the maximum you approved."""
    client = signer_client(key, rpc_url)
    if not client.pool.pool_approval(pool_id, client.address).approved:
        raise ProofpoolError(f"you have not approved pool {pool_id}")
    report_tx(client, f"revoked your approval of pool {pool_id}", client.pool.revoke_pool_approval(pool_id))


@app.command("sign-node")
def sign_node(
    node_key: str = typer.Option(..., help="The NODE's key (hex, key file or env:NAME); run this on the node."),
    provider: str = typer.Option(..., help="Address of the provider that will add the node."),
    ttl: int = typer.Option(86_400, min=60, help="Seconds (of chain time) the signature stays valid."),
    rpc_url: RpcOption = None,
) -> None:
    """On the node machine: sign that this node belongs to PROVIDER (bound to this chain and registry,
    usable once and until its deadline). Prints the values `provider add-node` takes."""
    node = load_account(node_key)
    client = reader_client(rpc_url)
    if not is_address(provider):
        raise ProofpoolError(f"not an address: {provider!r} (0x and 40 hex digits)")
    proof = client.registry.prove_ownership(node, to_checksum_address(provider), ttl)
    print_json(
        {"node": node.address, "provider": proof.provider, "deadline": proof.deadline, "signature": proof.signature}
    )


@app.command("add-node")
def add_node(
    node: str = typer.Option(None, help="Node address (with --signature and --deadline from `provider sign-node`)."),
    signature: str = typer.Option(None, help="The node's ownership signature (0x-hex)."),
    deadline: int = typer.Option(None, help="The signature's deadline (unix time, from `provider sign-node`)."),
    node_key: str = typer.Option(None, help="Or: the node's key, to sign here (devnet convenience)."),
    compute_units: int = typer.Option(1, min=1, help="Compute units the node offers."),
    specs: str = typer.Option("", help="Hardware description; its sha256 is stored on-chain."),
    key: KeyOption = None,
    rpc_url: RpcOption = None,
) -> None:
    """Add a node; required stake grows with your total compute units."""
    client = signer_client(key, rpc_url)
    if node_key:
        node_account = load_account(node_key)
        node = node_account.address
        proof = client.registry.prove_ownership(node_account, client.address)
    elif node and signature and deadline is not None:
        if not is_address(node):
            raise ProofpoolError(f"not an address: {node!r} (0x and 40 hex digits)")
        node = to_checksum_address(node)
        nonce = client.registry.node_nonce(node)
        proof = NodeOwnership(node, client.address, nonce, deadline, bytes.fromhex(signature.removeprefix("0x")))
    else:
        raise ProofpoolError("give --node-key, or --node, --signature and --deadline (from `provider sign-node`)")
    specs_hash = hashlib.sha256(specs.encode()).digest()
    receipt = client.registry.add_node(compute_units, specs_hash, proof)
    report_tx(client, f"added node {node} ({compute_units} compute units)", receipt)


@app.command()
def join(
    invite_file: Path = typer.Argument(..., help="Invite JSON written by `pool invite`."),
    key: KeyOption = None,
    rpc_url: RpcOption = None,
) -> None:
    """Join a pool with an invite signed by its manager (single use, expiring)."""
    try:
        data = json.loads(invite_file.read_text())
        invite = Invite(
            pool_id=int(data["pool_id"]),
            node=data["node"],
            nonce=int(data["nonce"]),
            expiry=int(data["expiry"]),
            signature=bytes.fromhex(data["signature"].removeprefix("0x")),
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ProofpoolError(f"{invite_file} is not an invite file: {exc}") from exc
    client = signer_client(key, rpc_url)
    report_tx(client, f"node {invite.node} joined pool {invite.pool_id}", client.pool.join_pool(invite))


@app.command()
def claim(key: KeyOption = None, rpc_url: RpcOption = None) -> None:
    """Withdraw your credited rewards (paid for finalized work) to your wallet."""
    client = signer_client(key, rpc_url)
    try:
        receipt = client.pool.withdraw_rewards()
    except ContractRevert as revert:
        if revert.name != "ComputePoolNothingToWithdraw":
            raise
        raise ProofpoolError(
            f"nothing to claim: {client.address} has no credited rewards (`provider status` shows pending work)"
        ) from None
    amount = withdrawn_amount(client, receipt)
    report_tx(client, f"claimed {format_pool(amount)} POOL to {client.address}", receipt)


def withdrawn_amount(client: ChainClient, receipt: TxReceipt) -> int:
    """What a `withdrawRewards` transaction paid the sender, from its RewardsWithdrawn event (the
    contract's word on the amount; a balance read before or after could race other credits)."""
    for event in client.pool.events(receipt):
        if event.name == "RewardsWithdrawn" and event["account"] == client.address:
            return int(event["amount"])
    raise ProofpoolError(f"tx 0x{receipt['transactionHash'].hex()} emitted no RewardsWithdrawn for {client.address}")


@app.command()
def status(
    address: str | None = typer.Argument(
        None, help="Provider address (default: the --key's address; no password needed).", show_default=False
    ),
    key: KeyOption = None,
    rpc_url: RpcOption = None,
    backend_url: BackendOption = None,
    as_json: JsonOption = False,
) -> None:
    """Stake, unbonding, rewards (withdrawable and pending), nodes and their pools, and slashes."""
    if address is not None and not is_address(address):
        raise ProofpoolError(f"not an address: {address!r} (0x and 40 hex digits)")
    provider = to_checksum_address(address) if address else account_address(key)
    chain = read_chain_standing(reader_client(rpc_url), provider)
    url = backend_url or get_settings().backend_url
    ledger: LedgerStanding | None = None
    ledger_error: str | None = None
    try:
        with LedgerClient(url, timeout=10.0) as client:
            ledger = read_ledger_standing(client, provider)
    except ProofpoolError as exc:  # unreachable or refusing backend: the chain part still stands
        ledger_error = str(exc)
    if as_json:
        print_json({**asdict(chain), "ledger": asdict(ledger) if ledger else None, "ledger_error": ledger_error})
        return
    console.print(render_chain(chain))
    if ledger is None:
        console.print(
            f"[yellow]ledger part unavailable[/yellow] (nodes, pools, pending rewards, slashes): {ledger_error}"
        )
        return
    console.print(render_ledger(ledger, url))


def _pool(units: int) -> str:
    return f"{format_pool(units)} POOL"


def render_chain(chain: ChainStanding) -> Group:
    """The chain part: a heading and a two-column table."""
    unbonding = _pool(chain.unbonding)
    if chain.unbonding:
        when = "withdrawable now" if chain.unbonding_withdrawable else "withdrawable from"
        unbonding += f", {when} {chain.unbonding_matures_at_utc} (unix {chain.unbonding_matures_at})"
        if chain.open_work:
            unbonding += " once no submission is open"
    claim = " (`provider claim` pays them out)" if chain.withdrawable_rewards else ""
    rows = {
        "registered": _yes(chain.registered),
        "active stake": _pool(chain.active_stake),
        "required stake": _pool(chain.required_stake),
        "unbonding": unbonding,
        "open submissions": f"{chain.open_work} (pending or in their dispute window; `provider finalize` settles)"
        if chain.open_work
        else "0",
        "compute units": str(chain.compute_units),
        "wallet": _pool(chain.wallet),
        "withdrawable rewards": _pool(chain.withdrawable_rewards) + claim,
    }
    return Group(f"[bold]provider {chain.provider}[/bold] (chain at block {chain.block_number})", _fields(rows))


def render_ledger(ledger: LedgerStanding, url: str) -> Group:
    """The ledger part: totals, then a table each for unpaid work, nodes with their pools, and slashes
    (left out when empty)."""
    totals = {
        "pending rewards": f"{_pool(ledger.pending_rewards)} (paid once accepted and finalized)",
        "nodes": str(len(ledger.nodes)),
        "slashes": f"{len(ledger.slashes)} ({_pool(ledger.slashed_total)})",
    }
    parts: list[RenderableType] = [
        f"[bold]ledger[/bold] at {url} (as far as its indexer has read the chain)",
        _fields(totals),
    ]
    if ledger.pending:
        pending = _table("unpaid work", "pool", "submissions", "work units", "reward per unit (POOL)", "reward (POOL)")
        for work in ledger.pending:
            pending.add_row(
                str(work.pool_id),
                str(work.submissions),
                str(work.work_units),
                format_pool(work.reward_per_unit),
                format_pool(work.reward),
            )
        parts.append(pending)
    if ledger.nodes:
        nodes = _table("nodes", "node", "compute units", "active", "attested", "pools (state)")
        for node in ledger.nodes:
            pools = ", ".join(
                f"{m.pool_id} ({m.state or '-'}{', blacklisted' if m.blacklisted else ''})" for m in node.pools
            )
            units = "" if node.compute_units is None else str(node.compute_units)
            nodes.add_row(node.address, units, _yes(node.active), _yes(node.attested), pools or "-")
        parts.append(nodes)
    if ledger.slashes:
        slashes = _table("slashes", "pool", "work key", "node", "amount (POOL)", "reason", "block", "tx")
        for slash in ledger.slashes:
            slashes.add_row(
                str(slash.pool_id),
                _short(slash.work_key),
                _short(slash.node or ""),
                format_pool(slash.amount),
                slash.reason or "?",
                str(slash.block_number),
                _short(slash.tx_hash),
            )
        parts.append(slashes)
    return Group(*parts)


def _fields(rows: dict[str, str]) -> Table:
    """Name/value lines without borders."""
    table = Table(show_header=False, box=None)
    table.add_column(style="bold", min_width=len("withdrawable rewards"))
    table.add_column()
    for name, value in rows.items():
        table.add_row(name, value)
    return table


def _table(title: str, *columns: str) -> Table:
    """A titled table; counts and amounts right-aligned."""
    table = Table(title=title, title_justify="left")
    for column in columns:
        numeric = column in ("compute units", "submissions", "work units", "block") or "POOL" in column
        table.add_column(column, justify="right" if numeric else "left")
    return table


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _short(value: str) -> str:
    return f"{value[:8]}…{value[-4:]}" if len(value) > 14 else value

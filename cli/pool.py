"""`proofpool pool`: what a pool creator and its manager do on-chain."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

import typer
from proofpool.cli.common import (
    JsonOption,
    KeyOption,
    RpcOption,
    console,
    needs_extra,
    print_json,
    reader_client,
    report_tx,
    signer_client,
)

from proofpool.core.errors import ProofpoolError
from proofpool.core.spec import NO_SPEC
from proofpool.envs import spec_commitment
from proofpool.infra.chain.accounts import key_location, load_account
from proofpool.infra.chain.bindings import PoolParams
from proofpool.infra.chain.client import ChainClient
from proofpool.infra.chain.gas import require_gas
from proofpool.infra.chain.signing import sign_invite
from proofpool.infra.chain.units import format_eth, format_pool, parse_pool

app = typer.Typer(no_args_is_help=True)


class PoolLeftUnfinished(ProofpoolError):
    """`pool create` made the pool, then a later step (fund, start) failed: rerunning it would make a
    second pool, so the message names the commands that finish this one."""


@dataclass(frozen=True)
class _Step:
    """A step of `pool create` after `createPool`."""

    doing: str
    """What it does, as in "funding failed"."""
    done: str
    """Its outcome, as in "created but not funded"."""
    command: str
    """The command that takes this step alone."""
    run: Callable[[], None]


@app.command()
def create(
    manager: str = typer.Option(None, help="Manager address (signs invites, publishes checkpoints). Default: you."),
    treasury: str = typer.Option(None, help="Receives the treasury share of slashed stake. Default: you."),
    model_uri: str = typer.Option(
        "devnet://tiny-llama/arithmetic-add-100",
        help="Model / task set URI. A spec://<sha256> or diloco://<sha256> URI (of a spec already published) also "
        "commits the pool to that sha256 as its on-chain specSha256.",
    ),
    reward_per_unit: str = typer.Option("0.01", help="POOL paid per finalized work unit (token)."),
    validator_fee: str = typer.Option("0.5", help="POOL paid to the attesting validator per submission."),
    slash_amount: str = typer.Option("50", help="POOL slashed per invalid submission."),
    dispute_window: int = typer.Option(3600, min=1, help="Seconds after attestation before work finalizes."),
    validator_share_bps: int = typer.Option(5000, min=0, max=10000, help="Validator share of slashes (bps)."),
    challenge_window: int = typer.Option(
        0,
        min=0,
        help="Seconds a rejection waits, contestable by other validators, before it slashes (0: at once). "
        "dispute window + challenge window must stay under the unbonding period.",
    ),
    contest_quorum: int = typer.Option(
        1, min=1, max=32, help="Contests by other validators that overturn a rejection (with a challenge window)."
    ),
    fund: str = typer.Option(None, help="Also fund the budget with this many POOL."),
    start: bool = typer.Option(False, "--start", help="Also start the pool."),
    spec: Path = typer.Option(
        None,
        help="A pool spec: an RL pool's (`proofpool env spec`) or a training pool's (`proofpool training spec`). "
        "Its base model (and a training pool's dataset) and the spec are published to the object store and the "
        "pool is created with the model URI spec://<its sha256> (diloco://<its sha256> for a training pool) and "
        "that sha256 as its on-chain specSha256. Needs --model.",
    ),
    model: Path = typer.Option(None, "--model", help="With --spec: the base model directory the spec was built on."),
    indices: Path = typer.Option(None, help="With an RL --spec: the index list (or `env filter` report) it names."),
    dataset: Path = typer.Option(
        None, help="With a training pool's --spec: its dataset file (`proofpool training dataset`)."
    ),
    key: KeyOption = None,
    rpc_url: RpcOption = None,
) -> None:
    """Create a pool (you become its creator); optionally fund and start it.

    With --fund or --start it first checks that you hold the POOL and the ETH for every transaction,
    so it refuses before the first one instead of leaving a pool half made; if a later step fails
    anyway, the error names the commands that finish this pool (running `pool create` again would
    make a second one).

    With --spec, the pool runs a task environment on a Hugging Face model: the spec, its index list
    and the base model go to the object store first, content-addressed, and the pool commits on-chain
    to the spec's sha256 twice, in its model URI (spec://<sha256>) and as its specSha256; every
    worker and validator refuses a pool whose two differ, rebuilds the environment from the spec and
    refuses any difference.

    With a training pool's --spec (DiLoCo), the base model becomes checkpoint 0 and the dataset goes
    to the object store with the spec, and the pool's model URI is diloco://<sha256>."""
    client = signer_client(key, rpc_url)
    units = None if fund is None else parse_pool(fund)
    if units is not None:
        if units == 0:
            raise ProofpoolError("--fund must be more than 0 POOL")
        _require_tokens(client, units, f"--fund {fund}")
    if spec is not None:
        model_uri = _publish_any_spec(spec, model, indices, dataset)
    params = PoolParams(
        manager=manager or client.address,
        treasury=treasury or client.address,
        model_uri=model_uri,
        spec_sha256=spec_commitment(model_uri),  # what a spec:// URI names, else zero: roles refuse any other
        reward_per_unit=parse_pool(reward_per_unit),
        validator_fee=parse_pool(validator_fee),
        slash_amount=parse_pool(slash_amount),
        dispute_window=dispute_window,
        validator_slash_share_bps=validator_share_bps,
        challenge_window=challenge_window,
        contest_quorum=contest_quorum,
    )
    _require_gas_for_create(client, params, units, start)
    pool_id, receipt = client.pool.create_pool(params)
    report_tx(client, f"created pool {pool_id}", receipt)
    again = _same_options(key, rpc_url)
    steps: list[_Step] = []
    if units is not None:
        command = f"proofpool pool fund {pool_id} {format_pool(units)}{again}"
        steps.append(_Step("funding", "funded", command, lambda: _fund(client, pool_id, units)))
    if start:
        command = f"proofpool pool start {pool_id}{again}"
        steps.append(_Step("starting", "started", command, lambda: _start(client, pool_id)))
    _finish(pool_id, steps)


def _require_tokens(client: ChainClient, units: int, what: str) -> None:
    """Refuse, before any transaction, to spend POOL the sender does not hold (`what` says what would)."""
    held = client.token.balance_of(client.address)
    if held < units:
        raise ProofpoolError(f"{client.address} holds {format_pool(held)} POOL; {what} needs {format_pool(units)} POOL")


def _require_gas_for_create(client: ChainClient, params: PoolParams, units: int | None, start: bool) -> None:
    """Refuse, before `createPool`, a sender without the ETH for every transaction `pool create` will
    send, so that running out cannot leave a pool half made. Each is counted at `createPool`'s
    estimate, the dearest of them (the later ones cannot be estimated before the pool exists). A lone
    `createPool` needs no check: the sender reports too little ETH for it."""
    txs = 1 + (units is not None) + start
    if units is not None and client.token.allowance(client.address, client.pool.address) < units:
        txs += 1  # the approval
    if txs == 1:
        return
    sender = client.pool.sender
    assert sender is not None  # a signer client
    cost = txs * sender.estimate_cost(client.pool.contract.functions.createPool(params.as_tuple()))
    need = f"this pool create sends {txs} transactions, about {format_eth(cost)} ETH"
    require_gas(client.w3, client.address, cost, need)


def _finish(pool_id: int, steps: Sequence[_Step]) -> None:
    """Take the steps after `createPool`; when one fails, say which commands finish the pool.

    Any failure is caught: the pool exists either way, and its id is what the user cannot find out
    otherwise (`proofpool -v` shows the traceback)."""
    for index, step in enumerate(steps):
        try:
            step.run()
        except Exception as exc:
            done = " and ".join(["created", *(s.done for s in steps[:index])])
            todo = ", then ".join(s.command for s in steps[index:])
            raise PoolLeftUnfinished(
                f"pool {pool_id} was {done} but not {step.done}: run {todo} ({step.doing} failed: {exc})"
            ) from exc


def _same_options(key: str | None, rpc_url: str | None) -> str:
    """This command's --key and --rpc-url, to repeat in a suggested command; a key given as hex is
    named `<your key>`, never echoed."""
    options = ""
    if key is not None:
        shown = key.startswith("env:") or not isinstance(key_location(key), str)
        options += f" --key {key if shown else '<your key>'}"
    if rpc_url is not None:
        options += f" --rpc-url {rpc_url}"
    return options


def _publish_any_spec(spec_file: Path, model: Path | None, indices: Path | None, dataset: Path | None) -> str:
    """Publish an RL pool's or a training pool's spec (by its `kind`); the model URI that names it."""
    if not _is_training_spec(spec_file):
        if dataset is not None:
            raise typer.BadParameter("--dataset goes with a training pool's spec only", param_hint="--dataset")
        return _publish_spec(spec_file, model, indices)
    model_dir = _required_model(model)
    if indices is not None:
        raise typer.BadParameter("a training pool's spec names no index list", param_hint="--indices")
    if dataset is None:
        raise typer.BadParameter("a training pool's spec needs --dataset, its dataset file", param_hint="--dataset")
    return _publish_diloco_spec(spec_file.read_bytes(), model_dir, dataset)


def _is_training_spec(spec_file: Path) -> bool:
    """Whether the spec at `spec_file` is a training pool's (`kind` "diloco"); `SpecError` for a file
    that is not a spec. A file that cannot be read is left to the RL path, which reads it itself."""
    from proofpool.core.diloco.spec import KIND, spec_kind

    try:
        data = spec_file.read_bytes()
    except OSError:
        return False
    return spec_kind(data) == KIND


def _required_model(model: Path | None) -> Path:
    """--model, which every --spec needs."""
    if model is None:
        raise typer.BadParameter("--spec needs --model, the base model directory it was built on", param_hint="--model")
    return model


def _publish_diloco_spec(data: bytes, model: Path, dataset: Path) -> str:
    """Publish a training pool's spec, its base model (checkpoint 0) and its dataset (each checked
    against the spec first); the `diloco://` model URI that names them."""
    from proofpool.core.diloco.spec import parse_diloco_spec
    from proofpool.infra.storage import ObjectStore
    from proofpool.training.published import diloco_uri, publish_diloco_spec

    parsed = parse_diloco_spec(data)
    console.print(f"publishing the base model, dataset and spec to the object store ({model}, {dataset})")
    stored = publish_diloco_spec(ObjectStore.from_settings(), parsed, model, dataset)
    console.print(f"training spec {stored.sha256()} published")
    return diloco_uri(stored.sha256())


def _publish_spec(spec_file: Path, model: Path | None, indices: Path | None) -> str:
    """Publish a spec, its index list and its base model; the model URI that names them."""
    model_dir = _required_model(model)
    from proofpool.cli.env import read_index_list

    from proofpool.core.spec import parse_spec
    from proofpool.envs.published import publish_spec, spec_uri
    from proofpool.envs.spec import spec_environment
    from proofpool.infra.storage import ObjectStore

    parsed = parse_spec(spec_file.read_bytes())
    listed, _band = read_index_list(indices)
    spec_environment(parsed, model_dir, listed)  # this machine agrees with the spec before anyone else is asked to
    console.print(f"publishing the base model and spec to the object store ({model_dir})")
    stored = publish_spec(ObjectStore.from_settings(), parsed, model_dir, listed)
    console.print(f"spec {stored.sha256()} published")
    return spec_uri(stored.sha256())


def _fund(client: ChainClient, pool_id: int, units: int) -> None:
    approval = client.token.ensure_allowance(client.pool.address, units)
    if approval is not None:
        report_tx(client, "approved the ComputePool", approval)
    report_tx(client, f"funded pool {pool_id} with {format_pool(units)} POOL", client.pool.fund_pool(pool_id, units))


def _start(client: ChainClient, pool_id: int) -> None:
    report_tx(client, f"started pool {pool_id}", client.pool.start_pool(pool_id))


@app.command()
def fund(
    pool_id: int = typer.Argument(..., help="Pool id."),
    amount: str = typer.Argument(..., help="POOL tokens to add to the reward budget."),
    key: KeyOption = None,
    rpc_url: RpcOption = None,
) -> None:
    """Add tokens to a pool's reward budget (anyone may)."""
    client = signer_client(key, rpc_url)
    units = parse_pool(amount)
    _require_tokens(client, units, f"funding pool {pool_id}")
    _fund(client, pool_id, units)


@app.command()
def start(
    pool_id: int = typer.Argument(..., help="Pool id."), key: KeyOption = None, rpc_url: RpcOption = None
) -> None:
    """Open a pool for joins and submissions (creator or manager)."""
    _start(signer_client(key, rpc_url), pool_id)


@app.command()
def close(
    pool_id: int = typer.Argument(..., help="Pool id."), key: KeyOption = None, rpc_url: RpcOption = None
) -> None:
    """Close a pool (creator or manager): no more joins or submissions. Validators judge the work
    submitted before during the wind-up (one dispute window); then `pool refund` returns the budget
    no attested work needs, and unjudged work can be expired."""
    client = signer_client(key, rpc_url)
    report_tx(client, f"closed pool {pool_id}", client.pool.close_pool(pool_id))
    _, ends_at = client.pool.budget_reserved(pool_id)
    console.print(f"wind-up until unix time {ends_at}: `proofpool pool refund {pool_id}` after that")


@app.command()
def invite(
    pool_id: int = typer.Argument(..., help="Pool id."),
    node: str = typer.Argument(..., help="Address of the node to invite."),
    expires_in: int = typer.Option(3600, min=1, help="Seconds the invite stays valid."),
    nonce: int = typer.Option(None, help="Invite nonce (default: current time in ns, unique enough)."),
    out: Path = typer.Option(None, help="Write the invite JSON here (default: print it)."),
    key: KeyOption = None,
    rpc_url: RpcOption = None,
) -> None:
    """Sign a single-use, expiring invite for NODE with the manager key (no transaction)."""
    client = reader_client(rpc_url)
    manager = load_account(key)
    pool = client.pool.get_pool(pool_id)
    if pool.manager.lower() != manager.address.lower():
        raise ProofpoolError(f"pool {pool_id} is managed by {pool.manager}, not by {manager.address}")
    signed = sign_invite(
        manager,
        pool_id,
        node,
        nonce if nonce is not None else time.time_ns(),
        int(time.time()) + expires_in,
        client.chain_id,
        client.pool.address,
    )
    data = asdict(signed)
    if out:
        out.write_text(json.dumps({**data, "signature": "0x" + signed.signature.hex()}, indent=2))
        console.print(f"invite for {node} to pool {pool_id} written to {out}")
    else:
        print_json(data)


@app.command("publish-checkpoint")
@needs_extra("trainer")
def publish_checkpoint(
    model_dir: Path = typer.Argument(
        ..., exists=True, file_okay=False, help="Model directory: config.json, safetensors weights, tokenizer files."
    ),
    pool_id: int = typer.Option(..., "--pool", min=1, help="Pool id."),
    version: int = typer.Option(..., "--version", min=0, help="Checkpoint version (strictly increasing)."),
    shard_mb: int = typer.Option(50, "--shard-mb", min=1, help="Largest weight shard, in MB (10^6 bytes)."),
    key: KeyOption = None,
    rpc_url: RpcOption = None,
) -> None:
    """Shard MODEL_DIR, upload it to the object store and anchor its manifest on-chain (manager key).

    Workers and validators load a checkpoint only when its manifest hash is the one published here.
    """
    from proofpool.infra.checkpoint import publish_checkpoint as publish
    from proofpool.infra.storage import ObjectStore

    client = signer_client(key, rpc_url)
    published = publish(client, ObjectStore.from_settings(), pool_id, version, model_dir, shard_mb * 1_000_000)
    manifest = published.manifest
    console.print(f"uploaded {len(manifest.files)} files ({manifest.total_size:,} bytes) to {published.uri}")
    console.print(f"manifest sha256 0x{published.manifest_sha256.hex()}")
    report_tx(client, f"published checkpoint {version} of pool {pool_id}", published.receipt)


@app.command("anchor-checkpoint")
def anchor_checkpoint(
    pool_id: int = typer.Argument(..., help="Pool id."),
    version: int = typer.Argument(..., help="Checkpoint version (strictly increasing)."),
    manifest_sha256: str = typer.Argument(..., help="sha256 of the checkpoint manifest (hex)."),
    uri: str = typer.Argument(..., help="Where the checkpoint is stored (s3://bucket/prefix/)."),
    key: KeyOption = None,
    rpc_url: RpcOption = None,
) -> None:
    """Anchor a manifest hash computed elsewhere (manager only); `publish-checkpoint` does it all."""
    try:
        digest = bytes.fromhex(manifest_sha256.removeprefix("0x"))
    except ValueError as exc:
        raise ProofpoolError("manifest sha256 must be 32 bytes of hex") from exc
    if len(digest) != 32:
        raise ProofpoolError("manifest sha256 must be 32 bytes of hex")
    client = signer_client(key, rpc_url)
    receipt = client.pool.publish_checkpoint(pool_id, version, digest, uri)
    report_tx(client, f"published checkpoint {version} of pool {pool_id}", receipt)


@app.command()
@needs_extra("trainer")
def checkpoint(
    pool_id: int = typer.Option(..., "--pool", min=1, help="Pool id."),
    version: int = typer.Option(None, "--version", min=0, help="Checkpoint version. Default: the latest."),
    rpc_url: RpcOption = None,
    as_json: JsonOption = False,
) -> None:
    """Version, manifest sha256 and URI of a pool's checkpoint as published on-chain."""
    from proofpool.infra.checkpoint import onchain_checkpoint

    client = reader_client(rpc_url)
    _require_pool(client, pool_id)
    anchored = onchain_checkpoint(client, pool_id, version)
    if anchored is None:
        which = "any checkpoint" if version is None else f"checkpoint {version}"
        raise ProofpoolError(f"pool {pool_id} has not published {which} on chain {client.chain_id}")
    data = asdict(anchored)
    if as_json:
        print_json(data)
        return
    published = datetime.fromtimestamp(anchored.published_at, UTC).isoformat(timespec="seconds")
    console.print(f"{'pool_id':16} {anchored.pool_id}")
    console.print(f"{'version':16} {anchored.version}")
    console.print(f"{'manifest_sha256':16} 0x{anchored.manifest_sha256.hex()}")
    console.print(f"{'uri':16} {anchored.uri}")
    console.print(f"{'published_at':16} {published}")
    if anchored.tx_hash is not None:
        console.print(f"{'tx':16} 0x{anchored.tx_hash.hex()} in block {anchored.block_number}")


@app.command()
def refund(
    pool_id: int = typer.Argument(..., help="A closed pool."),
    key: KeyOption = None,
    rpc_url: RpcOption = None,
) -> None:
    """Refund to the creator the budget no attested work needs (creator or manager; the pool must be
    closed and its wind-up, one dispute window after closing, over)."""
    client = signer_client(key, rpc_url)
    _require_pool(client, pool_id)
    reserved, ends_at = client.pool.budget_reserved(pool_id)
    if ends_at == 0:
        raise ProofpoolError(f"pool {pool_id} is not closed: `proofpool pool close {pool_id}` first")
    now = client.w3.eth.get_block("latest")["timestamp"]
    if now < ends_at:
        raise ProofpoolError(
            f"pool {pool_id} winds up until unix time {ends_at} ({ends_at - now} s): validators may still "
            "attest the work submitted before it closed"
        )
    budget = client.pool.get_pool(pool_id).budget
    receipt = client.pool.refund_budget(pool_id)
    report_tx(client, f"refunded {format_pool(budget - reserved)} POOL of pool {pool_id} to its creator", receipt)


@app.command()
def status(
    pool_id: int = typer.Argument(..., help="Pool id."),
    rpc_url: RpcOption = None,
    as_json: JsonOption = False,
) -> None:
    """Parameters, budget and latest checkpoint of a pool."""
    client = reader_client(rpc_url)
    _require_pool(client, pool_id)
    pool = client.pool.get_pool(pool_id)
    checkpoint = client.pool.latest_checkpoint(pool_id)
    rules = client.pool.challenge_rules(pool_id)
    data = {**asdict(pool), **asdict(rules), "status": pool.status.name, "latest_checkpoint": asdict(checkpoint)}
    if as_json:
        print_json(data)
        return
    for name in ("pool_id", "status", "creator", "manager", "treasury", "model_uri"):
        console.print(f"{name:24} {data[name]}")
    console.print(f"{'spec_sha256':24} " + ("none" if pool.spec_sha256 == NO_SPEC else f"0x{pool.spec_sha256.hex()}"))
    for name in ("dispute_window", "challenge_window", "contest_quorum"):
        console.print(f"{name:24} {data[name]}")
    for name in ("reward_per_unit", "validator_fee", "slash_amount", "budget"):
        console.print(f"{name:24} {format_pool(data[name])} POOL")
    console.print(f"{'validator_slash_share':24} {pool.validator_slash_share_bps / 100:.2f} %")
    if checkpoint.published_at:
        console.print(
            f"{'latest_checkpoint':24} v{checkpoint.version} 0x{checkpoint.manifest_sha256.hex()} {checkpoint.uri}"
        )
    else:
        console.print(f"{'latest_checkpoint':24} none")


def _require_pool(client: ChainClient, pool_id: int) -> None:
    """A one-line error for a pool id the chain does not have."""
    if not 1 <= pool_id <= client.pool.pool_count():
        raise ProofpoolError(f"no pool {pool_id} on chain {client.chain_id}")

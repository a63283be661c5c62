"""What the chain says about a pool's checkpoints, and fetching only what it vouches for.

`ComputePool` keeps the latest checkpoint of each pool in storage (`latestCheckpoint`) and
emits `CheckpointPublished(poolId, version, manifestSha256, uri)` for every one. The latest
version is one view call; an older one (a worker still on version n-1 within the async
window, a validator checking old work) comes from the event, found with `eth_getLogs`
filtered on its indexed pool and version, newest blocks first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from eth_utils import event_abi_to_log_topic

from proofpool.infra.chain.artifacts import load_artifact
from proofpool.infra.chain.client import ChainClient
from proofpool.infra.checkpoint.errors import CheckpointError, Reason
from proofpool.infra.checkpoint.fetch import ProgressCallback, ensure_checkpoint
from proofpool.infra.checkpoint.manifest import MAX_POOL_ID, MAX_VERSION
from proofpool.infra.storage import ObjectStore

LOG_WINDOW: Final = 10_000
"""Blocks per `eth_getLogs` request: what public RPC providers commonly allow."""


@dataclass(frozen=True)
class AnchoredCheckpoint:
    """A checkpoint as the chain records it."""

    pool_id: int
    version: int
    manifest_sha256: bytes
    uri: str
    published_at: int
    """Unix time of the block that published it."""
    block_number: int | None = None
    """Block of the publication (known when it was read from the event)."""
    tx_hash: bytes | None = None


def onchain_checkpoint(
    client: ChainClient, pool_id: int, version: int | None = None, *, log_window: int = LOG_WINDOW
) -> AnchoredCheckpoint | None:
    """Checkpoint `version` of `pool_id` (the latest when `version` is None) as published
    on-chain, or None when the chain has no such publication."""
    if not 0 <= pool_id <= MAX_POOL_ID or (version is not None and not 0 <= version <= MAX_VERSION):
        raise ValueError(f"pool id {pool_id} or version {version} out of range")
    latest = client.pool.latest_checkpoint(pool_id)
    if latest.published_at == 0 or (version is not None and version > latest.version):
        return None
    if version is None or version == latest.version:
        return AnchoredCheckpoint(pool_id, latest.version, latest.manifest_sha256, latest.uri, latest.published_at)
    return _from_logs(client, pool_id, version, log_window)


def onchain_manifest_sha256(client: ChainClient, pool_id: int, version: int) -> bytes | None:
    """The manifest sha256 the chain recorded for checkpoint `version` of `pool_id`, if any."""
    anchored = onchain_checkpoint(client, pool_id, version)
    return anchored.manifest_sha256 if anchored is not None else None


def ensure_published_checkpoint(
    client: ChainClient,
    store: ObjectStore,
    pool_id: int,
    version: int,
    cache_dir: Path,
    progress: ProgressCallback | None = None,
    *,
    relays: Sequence[str] = (),
    max_bytes: int | None = None,
) -> Path:
    """The local directory of checkpoint `version` of `pool_id`, trusted because its manifest
    hash is the one published on-chain (`not_on_chain` when there is none), and no larger than
    `max_bytes` in all (`checkpoint_too_large`).

    `relays` (base URLs, e.g. `Settings.checkpoint_relays`) are asked before the store, picked by
    observed success rate and bandwidth; whoever serves the bytes, the manifest must hash to the
    on-chain value and every file to its manifest entry (`ensure_checkpoint`)."""
    anchored = onchain_checkpoint(client, pool_id, version)
    if anchored is None:
        raise CheckpointError(Reason.NOT_ON_CHAIN, f"pool {pool_id} has no checkpoint {version} on chain")
    return ensure_checkpoint(
        store, anchored.uri, anchored.manifest_sha256, cache_dir, progress, relays=relays, max_bytes=max_bytes
    )


def _from_logs(client: ChainClient, pool_id: int, version: int, log_window: int) -> AnchoredCheckpoint | None:
    """The `CheckpointPublished` event of (pool, version), scanning back from the head."""
    topic = _checkpoint_topic()
    pool_topic = "0x" + pool_id.to_bytes(32, "big").hex()
    version_topic = "0x" + version.to_bytes(32, "big").hex()
    decoder = client.decoder()
    end = client.w3.eth.block_number
    while end >= client.book.deploy_block:
        start = max(client.book.deploy_block, end - log_window + 1)
        logs = client.w3.eth.get_logs(
            {
                "fromBlock": start,
                "toBlock": end,
                "address": client.pool.address,
                "topics": [topic, pool_topic, version_topic],
            }
        )
        for event in reversed(decoder.decode_logs(logs)):
            if event.name == "CheckpointPublished" and event["poolId"] == pool_id and event["version"] == version:
                block = client.w3.eth.get_block(event.block_number)
                return AnchoredCheckpoint(
                    pool_id=pool_id,
                    version=version,
                    manifest_sha256=bytes(event["manifestSha256"]),
                    uri=event["uri"],
                    published_at=int(block["timestamp"]),
                    block_number=event.block_number,
                    tx_hash=event.tx_hash,
                )
        end = start - 1
    return None


def _checkpoint_topic() -> str:
    abi = next(
        entry
        for entry in load_artifact("ComputePool").abi
        if entry.get("type") == "event" and entry.get("name") == "CheckpointPublished"
    )
    return "0x" + bytes(event_abi_to_log_topic(abi)).hex()

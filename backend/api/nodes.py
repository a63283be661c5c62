"""Discovery: signed `PUT /v1/nodes` (a node announces itself) and public `GET /v1/nodes/{address}`."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Annotated, Any

from eth_utils import to_checksum_address
from fastapi import APIRouter, Path
from proofpool.backend.api.deps import Conn, RedisDep, SettingsDep, SignedCaller
from proofpool.backend.api.errors import ApiError
from proofpool.backend.orchestrator import discovery
from proofpool.backend.orchestrator.states import Liveness, NodeState
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

router = APIRouter(prefix="/nodes", tags=["nodes"])

ADDRESS_PATTERN = r"^0x[0-9a-fA-F]{40}$"
MAX_SPECS = 32
"""Most keys a node's specs may have; together with the value bounds this caps a row at a few KiB."""

NO_NUL = r"^[^\x00]*$"
"""PostgreSQL text and JSONB cannot hold NUL characters: refuse them at the edge (422, not 500)."""
SpecKey = Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=NO_NUL)]
SpecValue = (
    Annotated[str, StringConstraints(max_length=256, pattern=NO_NUL)]
    | Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]
    | Annotated[float, Field(allow_inf_nan=False)]
    | bool
    | None
)


class Announcement(BaseModel):
    """What a node tells the backend about itself (the signer is the node)."""

    model_config = ConfigDict(extra="forbid")

    provider: str = Field(pattern=ADDRESS_PATTERN, description="Address of the provider that registered the node.")
    specs: dict[SpecKey, SpecValue] = Field(
        default_factory=dict,
        max_length=MAX_SPECS,
        description="Flat hardware/software facts (e.g. gpu, vram_gb, cores). sha256 of its canonical JSON "
        "may be registered on-chain as the node's specs hash.",
    )
    endpoint: str | None = Field(
        None,
        max_length=256,
        pattern=r"^https?://[^\s\x00]+$",
        description="Where the node can be reached, if anywhere.",
    )


class AnnouncementOut(BaseModel):
    address: str
    provider: str
    specs: dict[str, Any]
    endpoint: str | None
    announced_at: datetime
    updated_at: datetime


class UnservableOut(BaseModel):
    checkpoint_version: int
    batch: int
    reason: str
    detail: str
    reported_at: float


class NodeStatusOut(BaseModel):
    """The public status of a node."""

    address: str
    provider: str | None
    registered: bool = Field(description="Registered and active in the ComputeRegistry (as indexed).")
    compute_units: int | None
    announced: bool
    specs: dict[str, Any] | None
    endpoint: str | None
    specs_match: bool | None = Field(description="Announced specs hash to the on-chain specs hash (None: unknown).")
    state: NodeState | None = Field(description="None for a node that is registered but never announced.")
    pool_id: int | None
    last_heartbeat: float | None = Field(description="Unix seconds of the last heartbeat, if any.")
    unservable: UnservableOut | None = Field(
        None, description="The latest assignment the node reported it cannot serve (cleared when it finishes one)."
    )


@router.put(
    "",
    response_model=AnnouncementOut,
    responses={
        403: {
            "description": "`node_not_registered`: the chain (as indexed) has no active node for the signer (a node "
            "added seconds ago may not be indexed yet: retry); `provider_mismatch`: it is registered under another "
            "provider."
        }
    },
)
async def announce_node(body: Announcement, caller: SignedCaller, conn: Conn) -> AnnouncementOut:
    """Announce the signing node: accepted only if the chain registers it, active, under `provider`."""
    row = await discovery.announce(
        conn, caller.address, to_checksum_address(body.provider), dict(body.specs), body.endpoint
    )
    return AnnouncementOut(**row.__dict__)


@router.get(
    "/{address}",
    response_model=NodeStatusOut,
    responses={404: {"description": "`unknown_node`: neither registered (as indexed) nor announced."}},
)
async def get_node(
    address: Annotated[str, Path(pattern=ADDRESS_PATTERN, description="Node address (any case).")],
    conn: Conn,
    redis: RedisDep,
    settings: SettingsDep,
) -> NodeStatusOut:
    """State, pool and last heartbeat of a node. Public: nothing here is secret."""
    node = to_checksum_address(address)
    status = await discovery.node_status(
        conn, redis, node, now=time.time(), thresholds=Liveness(settings.unhealthy_after, settings.dead_after)
    )
    if status is None:
        raise ApiError(404, "unknown_node", f"node {node} is neither registered (as indexed) nor announced")
    problem = None if status.unservable is None else UnservableOut(**status.unservable.__dict__)
    return NodeStatusOut(**{**status.__dict__, "unservable": problem})

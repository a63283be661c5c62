"""Orchestrator: signed `POST /v1/heartbeat` (liveness + assignment) and signed
`GET /v1/invites/{node}` (the pool manager's EIP-712 invite, asked for by the node's provider)."""

from __future__ import annotations

import dataclasses
import time
from typing import Annotated

from eth_utils import to_checksum_address
from fastapi import APIRouter, Body, Path, Query, Response
from prometheus_client import Counter
from proofpool.backend.api.deps import Conn, RedisDep, SettingsDep, SignedCaller
from proofpool.backend.orchestrator import heartbeat as beats
from proofpool.backend.orchestrator import invites, unservable
from proofpool.backend.orchestrator.states import NodeState
from pydantic import BaseModel, ConfigDict, Field

router = APIRouter(tags=["orchestrator"])

BIGINT_MAX = 2**63 - 1
ADDRESS_PATTERN = r"^0x[0-9a-fA-F]{40}$"

HEARTBEATS = Counter("proofpool_heartbeats_total", "Heartbeats answered, by node state.", ["state"])
_HEARTBEATS_BY_STATE = {state: HEARTBEATS.labels(state.value) for state in NodeState}
INVITES = Counter("proofpool_invites_total", "Invites handed out (new or repeated).")


class CompletedBatchIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    checkpoint_version: int = Field(ge=0, le=BIGINT_MAX)
    batch: int = Field(ge=0, le=BIGINT_MAX)


class UnservableIn(BaseModel):
    """An assignment the node skipped, and why (e.g. `unknown_model_version`, `manifest_hash_mismatch`)."""

    model_config = ConfigDict(extra="forbid")

    checkpoint_version: int = Field(ge=0, le=BIGINT_MAX)
    batch: int = Field(ge=0, le=BIGINT_MAX)
    reason: str = Field(pattern=r"^[a-z][a-z0-9_]{0,63}$", description="Reason code.")
    detail: str = Field("", max_length=500, description="What the node saw, for operators.")


class HeartbeatIn(BaseModel):
    """Optional facts a node reports with its heartbeat; `{}` (or no body) is a plain heartbeat."""

    model_config = ConfigDict(extra="forbid")

    pool_id: int | None = Field(
        None, ge=0, le=BIGINT_MAX, description="The pool the node works for; refused if it is not a member there."
    )
    completed: CompletedBatchIn | None = Field(
        None, description="The batch the node just finished; the next heartbeat's assignment moves past it."
    )
    unservable: UnservableIn | None = Field(
        None, description="An assignment the node cannot serve; kept as its latest problem (GET /v1/nodes/{node})."
    )


class AssignmentOut(BaseModel):
    """What to do next: the same inputs always give the same assignment (retries are safe)."""

    pool_id: int
    checkpoint_version: int = Field(description="0 = the pool's initial model.")
    manifest_sha256: str | None = Field(description="Hex sha256 of the checkpoint manifest (None for version 0).")
    checkpoint_uri: str | None
    batch: int = Field(description="Batch counter for this checkpoint version; report it back in `completed`.")
    task_ids: list[str] = Field(description="Problem ids to solve, e.g. `add-17-58`.")
    sampling_seed: str = Field(description="uint64 seed of the Gumbel-max sampler, as a decimal string.")
    group_size: int = Field(description="Samples per problem.")
    max_tokens: int = Field(description="Completion budget per sample.")
    temperature: float = Field(
        description="Sampling temperature, the pool's: validators reject rows sampled at any other."
    )


class WithheldOut(BaseModel):
    """Why a healthy member of an active pool got no assignment: too many earlier batches of the
    checkpoint have no on-chain submission yet (they must be submitted first)."""

    batch: int = Field(description="The batch the node will be handed once it has submitted enough.")
    unsubmitted: int = Field(description="Batches before it without a submission.")
    max_unsubmitted: int


class HeartbeatOut(BaseModel):
    node: str
    state: NodeState
    pool_id: int | None
    assignment: AssignmentOut | None = Field(
        description="None unless the node is a healthy member of an active RL pool and not `withheld`; always "
        "None for a training pool (diloco://), whose members derive their work from the chain."
    )
    withheld: WithheldOut | None = None
    heartbeat_interval: float = Field(description="Seconds until the next heartbeat is expected.")
    server_time: float


class InviteOut(BaseModel):
    """Arguments of `ComputePool.joinPool`, signed by the pool manager."""

    pool_id: int
    node: str
    provider: str
    manager: str
    nonce: str = Field(description="uint256 as a decimal string.")
    expiry: int = Field(description="Unix seconds (chain time) after which the invite is refused.")
    signature: str = Field(description="0x-hex EIP-712 signature of the manager.")
    chain_id: int
    pool_contract: str


@router.post(
    "/heartbeat",
    response_model=HeartbeatOut,
    responses={
        403: {
            "description": "`node_not_registered`: the chain (as indexed) has no active node for the signer; "
            "`node_not_announced`: announce with PUT /v1/nodes first; `not_pool_member`: `pool_id` names a pool "
            "the node is not a member of."
        },
        503: {
            "description": "`environment_unavailable`: no environment for the pool's model URI is installed on this "
            "backend, so it cannot draw the pool's problems (RL pools only)."
        },
    },
)
async def heartbeat(
    caller: SignedCaller,
    conn: Conn,
    redis: RedisDep,
    settings: SettingsDep,
    body: Annotated[HeartbeatIn | None, Body()] = None,
) -> Response:
    """Record that the signing node is alive and return its state and assignment. Documents the route;
    ordinary heartbeats are answered by `heartbeat_route`, which hands this handler the rest."""
    body = body or HeartbeatIn()
    completed = None
    if body.completed is not None:
        completed = beats.CompletedBatch(body.completed.checkpoint_version, body.completed.batch)
    now = time.time()
    unservable_report = None
    if (u := body.unservable) is not None:
        unservable_report = unservable.UnservableReport(u.checkpoint_version, u.batch, u.reason, u.detail, now)
    result = await beats.heartbeat(
        conn, redis, caller.address, beats.Beat.under(settings, now, body.pool_id, completed, unservable_report)
    )
    _HEARTBEATS_BY_STATE[result.state].inc()
    assignment = None
    if (a := result.assignment) is not None:
        assignment = AssignmentOut(
            pool_id=a.pool_id,
            checkpoint_version=a.checkpoint.version,
            manifest_sha256=None if a.checkpoint.manifest_sha256 is None else a.checkpoint.manifest_sha256.hex(),
            checkpoint_uri=a.checkpoint.uri,
            batch=a.batch,
            task_ids=list(a.task_ids),
            sampling_seed=str(a.sampling_seed),
            group_size=a.group_size,
            max_tokens=a.max_tokens,
            temperature=a.temperature,
        )
    reply = HeartbeatOut(
        node=result.node,
        state=result.state,
        pool_id=result.pool_id,
        assignment=assignment,
        withheld=None if (w := result.withheld) is None else WithheldOut(**dataclasses.asdict(w)),
        heartbeat_interval=settings.heartbeat_interval,
        server_time=now,
    )
    # Serialized here: the model is built from checked values, and FastAPI's re-validation of
    # `response_model` would cost a noticeable share of the hottest route's CPU.
    return Response(reply.model_dump_json(), media_type="application/json")


@router.get(
    "/invites/{node}",
    response_model=InviteOut,
    responses={
        403: {
            "description": "`not_node_provider`: the signer is neither the node nor its provider; "
            "`node_not_registered`, `node_not_announced`; `pool_not_managed`, `pool_not_active`, `pool_not_approved` "
            "(the provider has not approved the pool); `node_banned`, `node_slashed`, `already_member`."
        },
        404: {"description": "`unknown_pool`: no such pool (as indexed); `no_active_pool`: we manage no active pool."},
        503: {
            "description": "`invites_unavailable`: this backend holds no (valid) pool manager key; `chain_unknown`: "
            "the indexer has not recorded the chain, or its address book is missing."
        },
    },
)
async def get_invite(
    node: Annotated[str, Path(pattern=ADDRESS_PATTERN, description="The node to invite.")],
    caller: SignedCaller,
    conn: Conn,
    settings: SettingsDep,
    pool_id: Annotated[
        int | None, Query(ge=0, le=BIGINT_MAX, description="Default: the lowest-id active pool we manage.")
    ] = None,
) -> InviteOut:
    """An invite for `node` to join a pool, for its provider (the signer) to pass to `joinPool`."""
    signed = await invites.issue_invite(
        conn, settings, caller.address, to_checksum_address(node), now=int(time.time()), pool_id=pool_id
    )
    INVITES.inc()
    row = signed.row
    return InviteOut(
        pool_id=row.pool_id,
        node=row.node,
        provider=row.provider,
        manager=row.manager,
        nonce=str(row.nonce),
        expiry=row.expiry,
        signature="0x" + row.signature.hex(),
        chain_id=signed.chain_id,
        pool_contract=signed.pool_contract,
    )

"""What a worker node (and its provider) says to the backend's discovery and orchestrator:
announce, heartbeat, and fetch an invite. Thin typed wrappers over `SignedClient`.

```python
deployment = dict(chain_id=client.chain_id, pool_contract=client.book.compute_pool)  # client: a ChainClient
with NodeApi(settings.backend_url, node_account, **deployment) as api:
    api.announce(provider=provider_address, specs={"cores": 2})
    beat = api.heartbeat()                      # beat.assignment is None until it joined a pool
    ...                                         # generate rollouts for beat.assignment.task_ids
    beat = api.heartbeat(completed=beat.assignment)
with NodeApi(settings.backend_url, provider_account, **deployment) as api:
    client.pool.join_pool(api.get_invite(node_address))   # the provider signs this one
```
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from eth_account.signers.local import LocalAccount
from eth_utils import to_checksum_address

from proofpool.infra.chain.signing import Invite
from proofpool.infra.http.signed_client import SignedClient


@dataclass(frozen=True)
class Assignment:
    """The work a heartbeat hands out (see docs/api-nodes.md)."""

    pool_id: int
    checkpoint_version: int
    manifest_sha256: bytes | None
    checkpoint_uri: str | None
    batch: int
    task_ids: tuple[str, ...]
    sampling_seed: int
    group_size: int
    max_tokens: int
    temperature: float
    """The pool's sampling temperature (every row of the file must carry it)."""

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Assignment:
        manifest = data.get("manifest_sha256")
        return cls(
            pool_id=int(data["pool_id"]),
            checkpoint_version=int(data["checkpoint_version"]),
            manifest_sha256=None if manifest is None else bytes.fromhex(manifest),
            checkpoint_uri=data.get("checkpoint_uri"),
            batch=int(data["batch"]),
            task_ids=tuple(data["task_ids"]),
            sampling_seed=int(data["sampling_seed"]),
            group_size=int(data["group_size"]),
            max_tokens=int(data["max_tokens"]),
            temperature=float(data["temperature"]),
        )


@dataclass(frozen=True)
class Heartbeat:
    """The backend's answer to a heartbeat."""

    node: str
    state: str
    """discovered, healthy, unhealthy, dead, ejected or banned."""
    pool_id: int | None
    assignment: Assignment | None
    heartbeat_interval: float
    server_time: float
    withheld: Withheld | None = None
    """Set when a healthy member got no assignment because earlier batches lack a submission."""

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Heartbeat:
        assignment, withheld = data.get("assignment"), data.get("withheld")
        return cls(
            node=data["node"],
            state=data["state"],
            pool_id=data.get("pool_id"),
            assignment=None if assignment is None else Assignment.from_json(assignment),
            heartbeat_interval=float(data["heartbeat_interval"]),
            server_time=float(data["server_time"]),
            withheld=None if withheld is None else Withheld(**{k: int(withheld[k]) for k in Withheld.FIELDS}),
        )


@dataclass(frozen=True)
class Withheld:
    """The next batch is held back until the node has submitted the ones it was handed before
    (the backend's `max_unsubmitted_batches`): every handed-out batch must be answered."""

    FIELDS: ClassVar[tuple[str, ...]] = ("batch", "unsubmitted", "max_unsubmitted")

    batch: int
    unsubmitted: int
    max_unsubmitted: int


@dataclass(frozen=True)
class BatchRef:
    """Names a finished batch in a heartbeat: the checkpoint version and batch counter it had."""

    checkpoint_version: int
    batch: int


@dataclass(frozen=True)
class Unservable:
    """An assignment the node skips, with a reason code for the backend's node status."""

    checkpoint_version: int
    batch: int
    reason: str
    detail: str = ""


UploadFormat = Literal["rollouts", "update"]
"""What a node uploads: a rollout file (RL pools) or an update file (training pools)."""


@dataclass(frozen=True)
class UploadTicket:
    """Where and how to PUT one file (see `proofpool.infra.storage.s3.put_presigned`)."""

    url: str
    headers: dict[str, str]
    key: str


@dataclass(frozen=True)
class SignedInvite:
    """An invite and the EIP-712 domain it was signed for."""

    invite: Invite
    provider: str
    manager: str
    chain_id: int
    pool_contract: str


class NodeApi:
    """Discovery and orchestrator calls, signed by `account` (the node, or its provider for invites)
    for the deployment `chain_id` + `pool_contract` (see `SignedClient`)."""

    def __init__(
        self, base_url: str, account: LocalAccount, *, chain_id: int, pool_contract: str, timeout: float = 10.0
    ) -> None:
        self._client = SignedClient(base_url, account, chain_id=chain_id, pool_contract=pool_contract, timeout=timeout)

    def announce(self, provider: str, specs: dict[str, Any] | None = None, endpoint: str | None = None) -> dict:
        """Tell the backend this node exists; refused (ApiRefused 403) until the chain registers it."""
        body: dict[str, Any] = {"provider": to_checksum_address(provider), "specs": specs or {}}
        if endpoint is not None:
            body["endpoint"] = endpoint
        return self._client.request("PUT", "/v1/nodes", json_body=body)

    def heartbeat(
        self,
        pool_id: int | None = None,
        completed: Assignment | BatchRef | None = None,
        unservable: Unservable | None = None,
    ) -> Heartbeat:
        """Report liveness; pass the assignment just finished as `completed` to get the next batch, or
        one it cannot serve as `unservable` (the backend keeps it as the node's latest problem)."""
        body: dict[str, Any] = {}
        if pool_id is not None:
            body["pool_id"] = pool_id
        if completed is not None:
            body["completed"] = {"checkpoint_version": completed.checkpoint_version, "batch": completed.batch}
        if unservable is not None:
            body["unservable"] = {
                "checkpoint_version": unservable.checkpoint_version,
                "batch": unservable.batch,
                "reason": unservable.reason,
                "detail": unservable.detail[:500],
            }
        return Heartbeat.from_json(self._client.request("POST", "/v1/heartbeat", json_body=body))

    def request_upload(self, pool_id: int, sha256: bytes, size: int, format: UploadFormat = "rollouts") -> UploadTicket:
        """A presigned PUT for this node's file (`POST /v1/uploads`): a rollout file, or with
        `format="update"` a training pool's update file. A rollout request sends no `format`, so it
        is the same request a backend from before training pools accepts."""
        body: dict[str, Any] = {"pool_id": pool_id, "sha256": sha256.hex(), "size": size}
        if format != "rollouts":
            body["format"] = format
        data = self._client.request("POST", "/v1/uploads", json_body=body)
        return UploadTicket(url=data["url"], headers=dict(data["headers"]), key=data["key"])

    def get_invite(self, node: str, pool_id: int | None = None) -> SignedInvite:
        """An invite for `node` (this client must be signed by its provider), ready for `join_pool`."""
        params = None if pool_id is None else {"pool_id": pool_id}
        data = self._client.request("GET", f"/v1/invites/{to_checksum_address(node)}", params=params)
        invite = Invite(
            pool_id=int(data["pool_id"]),
            node=to_checksum_address(data["node"]),
            nonce=int(data["nonce"]),
            expiry=int(data["expiry"]),
            signature=bytes.fromhex(data["signature"].removeprefix("0x")),
        )
        return SignedInvite(invite, data["provider"], data["manager"], int(data["chain_id"]), data["pool_contract"])

    def node_status(self, node: str) -> dict:
        """The public status of any node (signed anyway; the route ignores it)."""
        return self._client.request("GET", f"/v1/nodes/{to_checksum_address(node)}")

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> NodeApi:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

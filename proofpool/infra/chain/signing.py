"""EIP-712 messages our contracts verify: node ownership (ComputeRegistry) and pool
invites (ComputePool).

The domain carries chain id and contract address, so a signature made for one chain or
one deployment is refused by any other.
"""

from __future__ import annotations

from dataclasses import dataclass

from eth_account.messages import encode_typed_data
from eth_account.signers.local import LocalAccount

NODE_OWNERSHIP_DOMAIN = ("ProofpoolComputeRegistry", "1")
INVITE_DOMAIN = ("ProofpoolComputePool", "1")


@dataclass(frozen=True)
class Invite:
    """A single-use, expiring permission for `node` to join `pool_id`, signed by the pool manager."""

    pool_id: int
    node: str
    nonce: int
    expiry: int
    signature: bytes


@dataclass(frozen=True)
class NodeOwnership:
    """The node key's statement that it belongs to `provider`, valid once (`nonce`, the node's
    current `ComputeRegistry.nodeNonce`) and until `deadline` (unix time)."""

    node: str
    provider: str
    nonce: int
    deadline: int
    signature: bytes


def _domain(name_version: tuple[str, str], chain_id: int, contract: str) -> dict:
    name, version = name_version
    return {"name": name, "version": version, "chainId": chain_id, "verifyingContract": contract}


def sign_node_ownership(
    node: LocalAccount, provider: str, chain_id: int, registry: str, *, nonce: int, deadline: int
) -> NodeOwnership:
    """The node key's signature that it belongs to `provider` (proves key possession), for the
    node's current registry nonce and valid until `deadline`."""
    message = encode_typed_data(
        domain_data=_domain(NODE_OWNERSHIP_DOMAIN, chain_id, registry),
        message_types={
            "NodeOwnership": [
                {"name": "provider", "type": "address"},
                {"name": "node", "type": "address"},
                {"name": "nonce", "type": "uint256"},
                {"name": "deadline", "type": "uint256"},
            ]
        },
        message_data={"provider": provider, "node": node.address, "nonce": nonce, "deadline": deadline},
    )
    return NodeOwnership(node.address, provider, nonce, deadline, bytes(node.sign_message(message).signature))


def sign_invite(
    manager: LocalAccount, pool_id: int, node: str, nonce: int, expiry: int, chain_id: int, pool_contract: str
) -> Invite:
    """An invite for `node` signed with the pool manager's key."""
    message = encode_typed_data(
        domain_data=_domain(INVITE_DOMAIN, chain_id, pool_contract),
        message_types={
            "Invite": [
                {"name": "poolId", "type": "uint256"},
                {"name": "node", "type": "address"},
                {"name": "nonce", "type": "uint256"},
                {"name": "expiry", "type": "uint256"},
            ]
        },
        message_data={"poolId": pool_id, "node": node, "nonce": nonce, "expiry": expiry},
    )
    signature = bytes(manager.sign_message(message).signature)
    return Invite(pool_id=pool_id, node=node, nonce=nonce, expiry=expiry, signature=signature)

"""Deploying the four proofpool contracts, wiring their roles, and the address book.

`deploy_contracts` deploys PoolToken, StakeManager, ComputeRegistry and ComputePool with
the sender as admin, links StakeManager -> ComputeRegistry and grants StakeManager's
SLASHER_ROLE to ComputePool. Validators, attesters and faucet minters get their roles
later through `grant_role` (admin key). The address book (`deployments/<chain-id>.json`)
is what every other process reads to find the contracts.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from eth_utils import to_checksum_address
from web3 import Web3
from web3.types import TxReceipt

from proofpool.core.errors import ConfigError
from proofpool.infra.chain.artifacts import load_artifact
from proofpool.infra.chain.networks import DEVNET_CHAIN_ID
from proofpool.infra.chain.tx import TxSender
from proofpool.infra.chain.units import TOKEN

ContractName = Literal["PoolToken", "StakeManager", "ComputeRegistry", "ComputePool"]
RoleName = Literal["MINTER_ROLE", "SLASHER_ROLE", "ATTESTER_ROLE", "VALIDATOR_ROLE"]

ROLE_HOLDERS: dict[RoleName, ContractName] = {
    "MINTER_ROLE": "PoolToken",
    "SLASHER_ROLE": "StakeManager",
    "ATTESTER_ROLE": "ComputeRegistry",
    "VALIDATOR_ROLE": "ComputePool",
}
"""Which contract defines each role."""


@dataclass(frozen=True)
class DeployParams:
    """Constructor parameters of a deployment (devnet defaults)."""

    unbonding_period: int = 7 * 24 * 3600
    """Seconds between `unbond` and `withdraw`; every pool's dispute window must be shorter."""
    min_stake: int = 100 * TOKEN
    """Base stake a provider with registered compute units must keep active."""
    stake_per_compute_unit: int = 10 * TOKEN
    """Additional stake per registered compute unit."""
    admin_is_minter: bool = True
    """Grant MINTER_ROLE on PoolToken to the admin (the devnet faucet); False on a real chain."""
    min_validator_stake: int = 100 * TOKEN
    """Active stake a validator needs for any verdict (`ComputePool.setValidatorStakeParams`)."""
    validator_slash_amount: int = 50 * TOKEN
    """Stake a validator loses per overturned verdict; at most `min_validator_stake`."""

    def __post_init__(self) -> None:
        if self.unbonding_period <= 0:
            raise ConfigError("unbonding_period must be positive")
        if self.min_stake < 0 or self.stake_per_compute_unit < 0:
            raise ConfigError("stake parameters must not be negative")
        if not 0 <= self.validator_slash_amount <= self.min_validator_stake:
            raise ConfigError("validator_slash_amount must be between 0 and min_validator_stake")


@dataclass(frozen=True)
class AddressBook:
    """Where the contracts of one chain live, and how they were deployed."""

    chain_id: int
    pool_token: str
    stake_manager: str
    compute_registry: str
    compute_pool: str
    deploy_block: int
    """First block that can hold a log of these contracts (start of an indexer's scan)."""
    deployer: str
    """Account that deployed, holding DEFAULT_ADMIN_ROLE on every contract."""
    params: DeployParams = field(default_factory=DeployParams)

    @property
    def addresses(self) -> dict[ContractName, str]:
        """{contract name: address}, the shape `EventDecoder` takes."""
        return {
            "PoolToken": self.pool_token,
            "StakeManager": self.stake_manager,
            "ComputeRegistry": self.compute_registry,
            "ComputePool": self.compute_pool,
        }

    def to_json(self) -> dict[str, Any]:
        """The JSON document written to `deployments/<chain-id>.json`."""
        return {
            "chain_id": self.chain_id,
            "deploy_block": self.deploy_block,
            "deployer": self.deployer,
            "contracts": dict(self.addresses),
            "params": asdict(self.params),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AddressBook:
        """Inverse of `to_json`; raises `ConfigError` on a malformed document."""
        try:
            contracts = data["contracts"]
            return cls(
                chain_id=int(data["chain_id"]),
                pool_token=to_checksum_address(contracts["PoolToken"]),
                stake_manager=to_checksum_address(contracts["StakeManager"]),
                compute_registry=to_checksum_address(contracts["ComputeRegistry"]),
                compute_pool=to_checksum_address(contracts["ComputePool"]),
                deploy_block=int(data["deploy_block"]),
                deployer=to_checksum_address(data["deployer"]),
                params=DeployParams(**data.get("params", {})),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"malformed address book: {exc}") from exc


def deploy_contracts(w3: Web3, sender: TxSender, params: DeployParams | None = None) -> AddressBook:
    """Deploy and wire the four contracts with `sender` as admin; returns their address book."""
    params = params or DeployParams()
    if params.admin_is_minter and w3.eth.chain_id != DEVNET_CHAIN_ID:
        raise ConfigError(
            f"chain {w3.eth.chain_id} is not the devnet: a faucet (MINTER_ROLE for the deployer) exists only on "
            f"chain {DEVNET_CHAIN_ID}; deploy with --no-faucet"
        )
    admin = sender.address
    deploy_block = w3.eth.block_number + 1
    token = sender.deploy(load_artifact("PoolToken"), admin)
    stake_manager = sender.deploy(
        load_artifact("StakeManager"),
        token,
        admin,
        params.unbonding_period,
        params.min_stake,
        params.stake_per_compute_unit,
    )
    registry = sender.deploy(load_artifact("ComputeRegistry"), stake_manager, admin)
    pool = sender.deploy(load_artifact("ComputePool"), token, stake_manager, registry, admin)
    book = AddressBook(
        chain_id=w3.eth.chain_id,
        pool_token=token,
        stake_manager=stake_manager,
        compute_registry=registry,
        compute_pool=pool,
        deploy_block=deploy_block,
        deployer=admin,
        params=params,
    )
    stake_manager_contract = _contract(w3, book, "StakeManager")
    sender.send(stake_manager_contract.functions.setComputeRegistry(registry))
    sender.send(stake_manager_contract.functions.setWorkLedger(pool))
    grant_role(w3, sender, book, "SLASHER_ROLE", pool)
    if params.min_validator_stake:
        pool_contract = _contract(w3, book, "ComputePool")
        sender.send(
            pool_contract.functions.setValidatorStakeParams(params.min_validator_stake, params.validator_slash_amount)
        )
    if params.admin_is_minter:
        grant_role(w3, sender, book, "MINTER_ROLE", admin)
    return book


def grant_role(w3: Web3, admin: TxSender, book: AddressBook, role: RoleName, account: str) -> TxReceipt:
    """Grant `role` on the contract that defines it (admin key only). Emits RoleGranted."""
    contract = _contract(w3, book, ROLE_HOLDERS[role])
    role_id = role_hash(role)
    return admin.send(contract.functions.grantRole(role_id, to_checksum_address(account)))


def grant_validator(w3: Web3, admin: TxSender, book: AddressBook, validator: str) -> TxReceipt:
    """Allow `validator` to attest and invalidate work in every pool (ComputePool VALIDATOR_ROLE).

    On a deployment with a faucet (the devnet) the admin also tops the validator's stake up to the
    minimum a verdict needs (minted, then `StakeManager.stakeFor`); elsewhere the validator stakes
    for itself (`proofpool validator stake`).
    """
    receipt = grant_role(w3, admin, book, "VALIDATOR_ROLE", validator)
    if book.params.admin_is_minter:
        stake_validator_from_faucet(w3, admin, book, validator)
    return receipt


def stake_validator_from_faucet(w3: Web3, admin: TxSender, book: AddressBook, validator: str) -> int:
    """Devnet: mint and stake for `validator` what it lacks of the minimum validator stake; returns
    the amount staked (0 when it has enough)."""
    pool = _contract(w3, book, "ComputePool")
    stake_manager = _contract(w3, book, "StakeManager")
    token = _contract(w3, book, "PoolToken")
    minimum = int(pool.functions.validatorStakeParams().call()[0])
    lacking = minimum - int(stake_manager.functions.activeStake(to_checksum_address(validator)).call())
    if lacking <= 0:
        return 0
    admin.send(token.functions.mint(admin.address, lacking))
    admin.send(token.functions.approve(book.stake_manager, lacking))
    admin.send(stake_manager.functions.stakeFor(to_checksum_address(validator), lacking))
    return lacking


def role_hash(role: str) -> bytes:
    """The bytes32 id of an AccessControl role: keccak of its name, zero for DEFAULT_ADMIN_ROLE."""
    if role == "DEFAULT_ADMIN_ROLE":
        return b"\x00" * 32
    return bytes(Web3.keccak(text=role))


def address_book_path(chain_id: int, deployments_dir: Path) -> Path:
    """`<deployments_dir>/<chain-id>.json`."""
    return Path(deployments_dir) / f"{chain_id}.json"


def write_address_book(book: AddressBook, deployments_dir: Path) -> Path:
    """Write `book` to `deployments/<chain-id>.json` (atomically) and return the path."""
    path = address_book_path(book.chain_id, deployments_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(book.to_json(), indent=2) + "\n")
    tmp.replace(path)
    return path


def load_address_book(chain_id: int, deployments_dir: Path) -> AddressBook:
    """The address book of `chain_id`; `ConfigError` if the chain has no deployment."""
    path = address_book_path(chain_id, deployments_dir)
    if not path.exists():
        raise ConfigError(f"no deployment for chain {chain_id} at {path}: run `proofpool contracts deploy`")
    try:
        data = json.loads(path.read_text())
    except ValueError as exc:
        raise ConfigError(f"{path} is not valid JSON: {exc}") from exc
    book = AddressBook.from_json(data)
    if book.chain_id != chain_id:
        raise ConfigError(f"{path} describes chain {book.chain_id}, not {chain_id}")
    return book


def _contract(w3: Web3, book: AddressBook, name: ContractName) -> Any:
    return w3.eth.contract(address=book.addresses[name], abi=load_artifact(name).abi)

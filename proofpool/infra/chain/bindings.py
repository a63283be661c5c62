"""Typed Python twins of the contract functions the apps call.

Each binding wraps one deployed contract. Writes go through a `TxSender` (local signing,
nonces, revert decoding) and return the receipt; reads return plain values or frozen
dataclasses. Bindings never print or exit; addresses come from the address book.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from eth_account.signers.local import LocalAccount
from eth_utils import to_checksum_address
from web3 import Web3
from web3.contract.contract import ContractFunction
from web3.types import TxReceipt

from proofpool.core.spec import NO_SPEC
from proofpool.infra.chain.artifacts import load_artifact
from proofpool.infra.chain.bundles import MAX_BUNDLE_FILES, is_canonical
from proofpool.infra.chain.calls import AbiFunction
from proofpool.infra.chain.deploy import role_hash
from proofpool.infra.chain.errors import ChainError
from proofpool.infra.chain.events import ChainEvent, EventDecoder
from proofpool.infra.chain.signing import Invite, NodeOwnership, sign_node_ownership
from proofpool.infra.chain.tx import TxSender, call_data


class PoolStatus(IntEnum):
    """Mirrors IComputePool.PoolStatus."""

    NONE = 0
    CREATED = 1
    ACTIVE = 2
    CLOSED = 3


class MemberState(IntEnum):
    """Mirrors IComputePool.MemberState."""

    NONE = 0
    ACTIVE = 1
    LEFT = 2
    EJECTED = 3
    SLASHED = 4


class WorkStatus(IntEnum):
    """Mirrors IComputePool.WorkStatus."""

    NONE = 0
    PENDING = 1
    ACCEPTED = 2
    INVALID = 3
    FINALIZED = 4
    FORFEITED = 5
    REJECTED = 6
    EXPIRED = 7


@dataclass(frozen=True)
class PoolParams:
    """Parameters of `createPool` (see IComputePool.PoolParams)."""

    manager: str
    treasury: str
    model_uri: str
    reward_per_unit: int
    validator_fee: int
    slash_amount: int
    dispute_window: int
    validator_slash_share_bps: int
    challenge_window: int = 0
    """Seconds a rejection waits for contests before it slashes (0: it slashes at once)."""
    contest_quorum: int = 1
    """Contests by other validators that overturn a rejection (ignored when `challenge_window` is 0)."""
    spec_sha256: bytes = NO_SPEC
    """sha256 of the pool spec a `spec://` pool runs (its model URI names the same hash); `NO_SPEC`
    for any other pool. Stored and emitted as given: the roles check the two agree
    (`proofpool.envs.published.check_spec_commitment`)."""

    def __post_init__(self) -> None:
        if not isinstance(self.spec_sha256, bytes) or len(self.spec_sha256) != 32:
            raise ValueError(f"spec_sha256 must be 32 bytes, got {self.spec_sha256!r}")

    def as_tuple(self) -> tuple:
        return (
            to_checksum_address(self.manager),
            to_checksum_address(self.treasury),
            self.model_uri,
            self.spec_sha256,
            self.reward_per_unit,
            self.validator_fee,
            self.slash_amount,
            self.dispute_window,
            self.validator_slash_share_bps,
            self.challenge_window,
            self.contest_quorum,
        )


@dataclass(frozen=True)
class PoolInfo:
    """A pool as returned by `getPool`."""

    pool_id: int
    creator: str
    manager: str
    treasury: str
    status: PoolStatus
    model_uri: str
    spec_sha256: bytes
    """sha256 of the pool's spec (`NO_SPEC`: none), as created; see `PoolParams.spec_sha256`."""
    reward_per_unit: int
    validator_fee: int
    slash_amount: int
    dispute_window: int
    validator_slash_share_bps: int
    budget: int


@dataclass(frozen=True)
class NodeInfo:
    """A node as returned by `ComputeRegistry.getNode`."""

    node: str
    provider: str
    compute_units: int
    specs_hash: bytes
    attested: bool
    active: bool


@dataclass(frozen=True)
class Member:
    """Membership of a node in a pool (`getMember`)."""

    provider: str
    state: MemberState
    blacklisted: bool
    since: int


@dataclass(frozen=True)
class Work:
    """A submission (`getWork`)."""

    node: str
    provider: str
    status: WorkStatus
    work_units: int
    model_version: int
    submitted_at: int
    status_since: int
    validator: str


@dataclass(frozen=True)
class PoolApproval:
    """A provider's consent to a pool (`poolApproval`): the total the pool may slash from it."""

    max_slash: int
    slashed: int
    approved: bool


@dataclass(frozen=True)
class Rejection:
    """A rejection inside its challenge window (`getRejection`)."""

    validator: str
    reason: str
    executable_at: int
    previous: WorkStatus
    contesters: tuple[str, ...]


@dataclass(frozen=True)
class ChallengeRules:
    """How long a pool's rejections wait for contests, and how many contests overturn one."""

    challenge_window: int
    contest_quorum: int


NO_EVIDENCE = bytes(32)
"""The evidence hash of a verdict given without recorded evidence (devnet tools and benches)."""


@dataclass(frozen=True)
class Checkpoint:
    """The latest anchored checkpoint of a pool (`latestCheckpoint`)."""

    version: int
    manifest_sha256: bytes
    uri: str
    published_at: int


def reason_code(text: str) -> bytes:
    """A short ASCII reason code as the right-padded bytes32 the contract stores."""
    raw = text.encode("ascii")
    if len(raw) > 32:
        raise ValueError(f"reason code longer than 32 bytes: {text!r}")
    return raw.ljust(32, b"\x00")


def reason_text(code: bytes) -> str:
    """Inverse of `reason_code`."""
    return code.rstrip(b"\x00").decode("ascii", errors="replace")


class ContractBinding:
    """Common part: the web3 contract object, an optional sender, and receipt decoding."""

    contract_name: str = ""
    _functions: dict[str, AbiFunction]
    """Per binding class: the functions called by hand so far (`_function`)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._functions = {}

    def __init__(self, w3: Web3, address: str, sender: TxSender | None = None) -> None:
        self.w3 = w3
        self.address = to_checksum_address(address)
        self.contract = w3.eth.contract(address=self.address, abi=load_artifact(self.contract_name).abi)
        self.sender = sender
        self._decoder = EventDecoder(w3, {self.contract_name: self.address})

    def with_sender(self, sender: TxSender) -> ContractBinding:
        """The same contract, sending from another account."""
        return type(self)(self.w3, self.address, sender)

    def _send(self, fn: ContractFunction) -> TxReceipt:
        if self.sender is None:
            raise ChainError(f"{self.contract_name} binding is read-only: it was built without a key")
        return self.sender.send(fn)

    def _call(self, fn: ContractFunction) -> Any:
        if self.sender is not None:
            return self.sender.call(fn)
        return fn.call()

    def _function(self, name: str) -> AbiFunction:
        """`name`'s selector and types, worked out once per contract."""
        functions = type(self)._functions
        if name not in functions:
            functions[name] = AbiFunction.of(self.contract.abi, name)
        return functions[name]

    def _call_encoded(self, name: str, *args: Any) -> tuple[Any, ...]:
        """`_call` without web3's per-call machinery, for calls on a hot path (`proofpool.infra.chain.calls`)."""
        function = self._function(name)
        data = function.encode(*args)
        if self.sender is not None:
            return function.decode(self.sender.call_data(self.address, data))
        return function.decode(call_data(self.w3, self.address, data))

    def _send_encoded(self, name: str, *args: Any) -> TxReceipt:
        """`_send` without web3's per-call machinery, for transactions on a hot path."""
        if self.sender is None:
            raise ChainError(f"{self.contract_name} binding is read-only: it was built without a key")
        return self.sender.send_data(self.address, self._function(name).encode(*args))

    def events(self, receipt: TxReceipt) -> list[ChainEvent]:
        """Events this contract emitted in `receipt`."""
        return self._decoder.decode_receipt(receipt)

    def role(self, name: str) -> bytes:
        """The bytes32 id of an AccessControl role (e.g. "VALIDATOR_ROLE")."""
        return role_hash(name)

    def grant_role(self, role_name: str, account: str) -> TxReceipt:
        return self._send(self.contract.functions.grantRole(self.role(role_name), to_checksum_address(account)))

    def revoke_role(self, role_name: str, account: str) -> TxReceipt:
        return self._send(self.contract.functions.revokeRole(self.role(role_name), to_checksum_address(account)))

    def has_role(self, role_name: str, account: str) -> bool:
        return bool(self._call(self.contract.functions.hasRole(self.role(role_name), to_checksum_address(account))))


class PoolToken(ContractBinding):
    contract_name = "PoolToken"

    def balance_of(self, account: str) -> int:
        return int(self._call(self.contract.functions.balanceOf(to_checksum_address(account))))

    def allowance(self, owner: str, spender: str) -> int:
        fn = self.contract.functions.allowance(to_checksum_address(owner), to_checksum_address(spender))
        return int(self._call(fn))

    def approve(self, spender: str, amount: int) -> TxReceipt:
        return self._send(self.contract.functions.approve(to_checksum_address(spender), amount))

    def transfer(self, to: str, amount: int) -> TxReceipt:
        return self._send(self.contract.functions.transfer(to_checksum_address(to), amount))

    def mint(self, to: str, amount: int) -> TxReceipt:
        return self._send(self.contract.functions.mint(to_checksum_address(to), amount))

    def ensure_allowance(self, spender: str, amount: int) -> TxReceipt | None:
        """Approve `amount` for `spender` unless the allowance already covers it."""
        assert self.sender is not None
        if self.allowance(self.sender.address, spender) >= amount:
            return None
        return self.approve(spender, amount)


class StakeManager(ContractBinding):
    contract_name = "StakeManager"

    def stake(self, amount: int) -> TxReceipt:
        return self._send(self.contract.functions.stake(amount))

    def unbond(self, amount: int) -> TxReceipt:
        return self._send(self.contract.functions.unbond(amount))

    def withdraw(self) -> TxReceipt:
        return self._send(self.contract.functions.withdraw())

    def active_stake(self, provider: str) -> int:
        return int(self._call(self.contract.functions.activeStake(to_checksum_address(provider))))

    def unbonding(self, provider: str) -> tuple[int, int]:
        """(amount, maturesAt) of the provider's unbonding bucket."""
        amount, matures_at = self._call(self.contract.functions.unbonding(to_checksum_address(provider)))
        return int(amount), int(matures_at)

    def required_stake(self, provider: str) -> int:
        return int(self._call(self.contract.functions.requiredStake(to_checksum_address(provider))))

    def required_stake_for(self, compute_units: int) -> int:
        return int(self._call(self.contract.functions.requiredStakeFor(compute_units)))

    def unbonding_period(self) -> int:
        return int(self._call(self.contract.functions.unbondingPeriod()))

    def work_ledger(self) -> str:
        return str(self._call(self.contract.functions.workLedger()))


class ComputeRegistry(ContractBinding):
    contract_name = "ComputeRegistry"

    def register_provider(self) -> TxReceipt:
        return self._send(self.contract.functions.registerProvider())

    def add_node(self, compute_units: int, specs_hash: bytes, ownership: NodeOwnership) -> TxReceipt:
        fn = self.contract.functions.addNode(
            to_checksum_address(ownership.node), compute_units, specs_hash, ownership.deadline, ownership.signature
        )
        return self._send(fn)

    def node_nonce(self, node: str) -> int:
        """The nonce the node's next ownership signature must carry."""
        return int(self._call(self.contract.functions.nodeNonce(to_checksum_address(node))))

    def prove_ownership(self, node: LocalAccount, provider: str, ttl: int = 3600) -> NodeOwnership:
        """`node`'s ownership signature for `provider` with its current nonce, valid `ttl` seconds of
        chain time (for callers that hold the node key where the provider sends)."""
        deadline = int(self.w3.eth.get_block("latest")["timestamp"]) + ttl
        return sign_node_ownership(
            node, provider, self.w3.eth.chain_id, self.address, nonce=self.node_nonce(node.address), deadline=deadline
        )

    def remove_node(self, node: str) -> TxReceipt:
        return self._send(self.contract.functions.removeNode(to_checksum_address(node)))

    def attest_node(self, node: str) -> TxReceipt:
        return self._send(self.contract.functions.attestNode(to_checksum_address(node)))

    def get_node(self, node: str) -> NodeInfo:
        provider, units, specs, attested, active = self._call(
            self.contract.functions.getNode(to_checksum_address(node))
        )
        return NodeInfo(to_checksum_address(node), provider, int(units), bytes(specs), attested, active)

    def provider_compute_units(self, provider: str) -> int:
        return int(self._call(self.contract.functions.providerComputeUnits(to_checksum_address(provider))))

    def active_node_provider(self, node: str) -> str | None:
        """The provider of `node` while it is active in the registry, else None."""
        provider = self._call(self.contract.functions.activeNodeProvider(to_checksum_address(node)))
        return None if int(provider, 16) == 0 else to_checksum_address(provider)

    def node_ownership_digest(self, provider: str, node: str, nonce: int, deadline: int) -> bytes:
        """The EIP-712 digest a node key signs for `addNode` (to check off-chain signers)."""
        fn = self.contract.functions.nodeOwnershipDigest(
            to_checksum_address(provider), to_checksum_address(node), nonce, deadline
        )
        return bytes(self._call(fn))

    def is_provider(self, account: str) -> bool:
        return bool(self._call(self.contract.functions.isProvider(to_checksum_address(account))))


class ComputePool(ContractBinding):
    contract_name = "ComputePool"

    def create_pool(self, params: PoolParams) -> tuple[int, TxReceipt]:
        """Create a pool; returns its id (read from the PoolCreated event) and the receipt."""
        receipt = self._send(self.contract.functions.createPool(params.as_tuple()))
        created = [e for e in self.events(receipt) if e.name == "PoolCreated"]
        return int(created[0]["poolId"]), receipt

    def fund_pool(self, pool_id: int, amount: int) -> TxReceipt:
        return self._send(self.contract.functions.fundPool(pool_id, amount))

    def start_pool(self, pool_id: int) -> TxReceipt:
        return self._send(self.contract.functions.startPool(pool_id))

    def close_pool(self, pool_id: int) -> TxReceipt:
        return self._send(self.contract.functions.closePool(pool_id))

    def approve_pool(self, pool_id: int, max_slash: int) -> TxReceipt:
        """Let the sender's nodes join `pool_id`, committing at most `max_slash` of its stake to it."""
        return self._send(self.contract.functions.approvePool(pool_id, max_slash))

    def revoke_pool_approval(self, pool_id: int) -> TxReceipt:
        return self._send(self.contract.functions.revokePoolApproval(pool_id))

    def pool_approval(self, pool_id: int, provider: str) -> PoolApproval:
        max_slash, slashed, approved = self._call(
            self.contract.functions.poolApproval(pool_id, to_checksum_address(provider))
        )
        return PoolApproval(int(max_slash), int(slashed), bool(approved))

    def open_work(self, provider: str) -> int:
        """Submissions of the provider's nodes still Pending or Accepted (its stake cannot be withdrawn)."""
        return int(self._call(self.contract.functions.openWork(to_checksum_address(provider))))

    def join_pool(self, invite: Invite) -> TxReceipt:
        fn = self.contract.functions.joinPool(
            invite.pool_id, to_checksum_address(invite.node), invite.nonce, invite.expiry, invite.signature
        )
        return self._send(fn)

    def leave_pool(self, pool_id: int, node: str) -> TxReceipt:
        return self._send(self.contract.functions.leavePool(pool_id, to_checksum_address(node)))

    def eject_node(self, pool_id: int, node: str) -> TxReceipt:
        return self._send(self.contract.functions.ejectNode(pool_id, to_checksum_address(node)))

    def blacklist_node(self, pool_id: int, node: str) -> TxReceipt:
        return self._send(self.contract.functions.blacklistNode(pool_id, to_checksum_address(node)))

    def submit_work(self, pool_id: int, node: str, work_key: bytes, work_units: int, model_version: int) -> TxReceipt:
        """Encoded by hand: a provider node sends one per batch (`proofpool.infra.chain.calls`)."""
        return self._send_encoded("submitWork", pool_id, to_checksum_address(node), work_key, work_units, model_version)

    def submit_work_bundle(
        self,
        pool_id: int,
        node: str,
        file_keys: Sequence[bytes],
        file_units: Sequence[int],
        model_version: int,
    ) -> TxReceipt:
        """Record `file_keys` (with `file_units`) as one submission keyed `bundle_key(file_keys,
        file_units)`. The files must already be canonical (`proofpool.infra.chain.bundles.canonical`):
        a shape the contract would refuse raises ValueError here, before any gas is spent. Encoded by
        hand, as `submit_work`."""
        if not is_canonical(file_keys, file_units):
            raise ValueError(
                f"bundle of {len(file_keys)} keys and {len(file_units)} unit counts is not canonical "
                f"(1..{MAX_BUNDLE_FILES} files, 32-byte keys strictly ascending, units in 1..2^64-1)"
            )
        return self._send_encoded(
            "submitWorkBundle",
            pool_id,
            to_checksum_address(node),
            [bytes(key) for key in file_keys],
            list(file_units),
            model_version,
        )

    def work_files(self, pool_id: int, work_key: bytes) -> int:
        """Files of a submission: 1 for `submit_work`, the count of a bundle, 0 for an unknown key."""
        (files,) = self._call_encoded("workFiles", pool_id, work_key)
        return int(files)

    def attest_work(self, pool_id: int, work_keys: Sequence[bytes], evidence_sha256: bytes) -> TxReceipt:
        """Attest `work_keys`, committing to the sha256 of the batch's evidence."""
        return self._send(self.contract.functions.attestWork(pool_id, list(work_keys), evidence_sha256))

    def invalidate_work(self, pool_id: int, work_key: bytes, reason: str, evidence_sha256: bytes) -> TxReceipt:
        """Reject `work_key` for `reason`, committing to the sha256 of the evidence; the slash executes at
        once when the pool's challenge window is 0, else by `execute_rejection` after the window."""
        fn = self.contract.functions.invalidateWork(pool_id, work_key, reason_code(reason), evidence_sha256)
        return self._send(fn)

    def contest_rejection(self, pool_id: int, work_key: bytes, evidence_sha256: bytes) -> TxReceipt:
        """Contest another validator's rejection of `work_key` (after recomputing it and finding it valid)."""
        return self._send(self.contract.functions.contestRejection(pool_id, work_key, evidence_sha256))

    def execute_rejection(self, pool_id: int, work_key: bytes) -> TxReceipt:
        """Apply an uncontested rejection whose challenge window has passed (anyone may)."""
        return self._send(self.contract.functions.executeRejection(pool_id, work_key))

    def get_rejection(self, pool_id: int, work_key: bytes) -> Rejection | None:
        """The rejection of `work_key` waiting for its challenge window; None unless it is Rejected."""
        validator, reason, executable_at, previous, contesters = self._call(
            self.contract.functions.getRejection(pool_id, work_key)
        )
        if int(executable_at) == 0:
            return None
        return Rejection(validator, reason_text(reason), int(executable_at), WorkStatus(previous), tuple(contesters))

    def refund_budget(self, pool_id: int) -> TxReceipt:
        """Creator or manager: refund to the creator what a closed pool's attested work does not need."""
        return self._send(self.contract.functions.refundBudget(pool_id))

    def expire_work(self, pool_id: int, work_keys: Sequence[bytes]) -> TxReceipt:
        """Settle Pending work of a closed pool whose wind-up is over (anyone may): no pay, no slash."""
        return self._send(self.contract.functions.expireWork(pool_id, list(work_keys)))

    def budget_reserved(self, pool_id: int) -> tuple[int, int]:
        """(budget reserved for attested work, end of the closed pool's wind-up or 0)."""
        reserved, wind_up_ends_at = self._call(self.contract.functions.budgetReserved(pool_id))
        return int(reserved), int(wind_up_ends_at)

    def challenge_rules(self, pool_id: int) -> ChallengeRules:
        window, quorum = self._call(self.contract.functions.challengeRules(pool_id))
        return ChallengeRules(int(window), int(quorum))

    def set_validator_stake_params(self, min_validator_stake: int, validator_slash_amount: int) -> TxReceipt:
        """Admin: the stake every verdict needs, and what an overturned verdict costs its validator."""
        fn = self.contract.functions.setValidatorStakeParams(min_validator_stake, validator_slash_amount)
        return self._send(fn)

    def validator_stake_params(self) -> tuple[int, int]:
        """(minimum validator stake, slash per overturned verdict)."""
        minimum, slash = self._call(self.contract.functions.validatorStakeParams())
        return int(minimum), int(slash)

    def finalize_work(self, pool_id: int, work_keys: Sequence[bytes]) -> TxReceipt:
        return self._send(self.contract.functions.finalizeWork(pool_id, list(work_keys)))

    def withdraw_rewards(self) -> TxReceipt:
        return self._send(self.contract.functions.withdrawRewards())

    def publish_checkpoint(self, pool_id: int, version: int, manifest_sha256: bytes, uri: str) -> TxReceipt:
        return self._send(self.contract.functions.publishCheckpoint(pool_id, version, manifest_sha256, uri))

    def pool_count(self) -> int:
        return int(self._call(self.contract.functions.poolCount()))

    def get_pool(self, pool_id: int) -> PoolInfo:
        raw = self._call(self.contract.functions.getPool(pool_id))
        (creator, manager, treasury, status, uri, spec, reward, fee, slash, window, bps, budget) = raw
        return PoolInfo(
            pool_id,
            creator,
            manager,
            treasury,
            PoolStatus(status),
            uri,
            bytes(spec),
            reward,
            fee,
            slash,
            window,
            bps,
            budget,
        )

    def get_member(self, pool_id: int, node: str) -> Member:
        provider, state, blacklisted, since = self._call(
            self.contract.functions.getMember(pool_id, to_checksum_address(node))
        )
        return Member(provider, MemberState(state), blacklisted, int(since))

    def get_work(self, pool_id: int, work_key: bytes) -> Work:
        node, provider, status, units, version, submitted, since, validator = self._call_encoded(
            "getWork", pool_id, work_key
        )
        return Work(
            node,
            provider,
            WorkStatus(status),
            int(units),
            int(version),
            int(submitted),
            int(since),
            validator,
        )

    def reward_balance(self, account: str) -> int:
        return int(self._call(self.contract.functions.rewardBalance(to_checksum_address(account))))

    def is_blacklisted(self, pool_id: int, node: str) -> bool:
        return bool(self._call(self.contract.functions.isBlacklisted(pool_id, to_checksum_address(node))))

    def latest_checkpoint(self, pool_id: int, block: int | None = None) -> Checkpoint:
        """The newest published checkpoint, now or as of `block` (what a submission in that block saw)."""
        if block is None:  # encoded by hand: a provider node asks before every submission
            version, manifest, uri, published_at = self._call_encoded("latestCheckpoint", pool_id)
        else:
            fn = self.contract.functions.latestCheckpoint(pool_id)
            version, manifest, uri, published_at = fn.call(block_identifier=block)
        return Checkpoint(int(version), bytes(manifest), uri, int(published_at))

    def is_invite_used(self, digest: bytes) -> bool:
        return bool(self._call(self.contract.functions.isInviteUsed(digest)))

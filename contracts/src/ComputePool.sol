// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {AccessControl} from "@openzeppelin/contracts/access/AccessControl.sol";
import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {SafeERC20} from "@openzeppelin/contracts/token/ERC20/utils/SafeERC20.sol";
import {ReentrancyGuard} from "@openzeppelin/contracts/utils/ReentrancyGuard.sol";
import {ECDSA} from "@openzeppelin/contracts/utils/cryptography/ECDSA.sol";
import {SafeCast} from "@openzeppelin/contracts/utils/math/SafeCast.sol";
import {EIP712} from "@openzeppelin/contracts/utils/cryptography/EIP712.sol";

import {IComputePool} from "./interfaces/IComputePool.sol";
import {IComputeRegistry} from "./interfaces/IComputeRegistry.sol";
import {IStakeManager} from "./interfaces/IStakeManager.sol";
import {IWorkLedger} from "./interfaces/IWorkLedger.sol";

/// @title ComputePool
/// @notice Compute pools, membership, submissions, verdicts and rewards. See {IComputePool}.
/// @dev Gas layout: a submission is two storage slots. `WorkHead` (status, validator, statusSince,
/// submittedAt) is the only slot attestWork and finalizeWork write; `WorkBody` (node, units, version) is
/// written once. attestWork, invalidateWork and finalizeWork read the provider from the membership record
/// bound at join; only submitWork asks the registry (once) whether the node is still active under it.
contract ComputePool is IComputePool, AccessControl, ReentrancyGuard, EIP712 {
    using SafeERC20 for IERC20;

    /// @notice Role allowed to attest and invalidate work.
    bytes32 public constant VALIDATOR_ROLE = keccak256("VALIDATOR_ROLE");

    /// @notice EIP-712 type hash of Invite(uint256 poolId,address node,uint256 nonce,uint256 expiry).
    bytes32 public constant INVITE_TYPEHASH = keccak256("Invite(uint256 poolId,address node,uint256 nonce,uint256 expiry)");

    uint256 private constant _BPS = 10_000;

    /// @dev Upper bound of a pool's contest quorum: contesting scans the contesters so far.
    uint16 private constant _MAX_QUORUM = 32;

    struct Pool {
        address creator;
        PoolStatus status;
        uint64 disputeWindow;
        uint16 validatorSlashShareBps;
        address manager;
        uint64 challengeWindow;
        uint16 contestQuorum;
        address treasury;
        uint40 closedAt;
        uint256 rewardPerUnit;
        uint256 validatorFee;
        uint256 slashAmount;
        uint256 budget;
        uint256 reserved;
        string modelUri;
    }

    struct Member {
        address provider;
        MemberState state;
        bool blacklisted;
        uint40 since;
    }

    struct WorkHead {
        WorkStatus status;
        address validator;
        uint40 statusSince;
        uint40 submittedAt;
    }

    struct WorkBody {
        address node;
        uint64 workUnits;
        uint32 modelVersion;
    }

    struct Work {
        WorkHead head;
        WorkBody body;
    }

    struct Checkpoint {
        uint32 version;
        uint40 publishedAt;
        bytes32 manifestSha256;
        string uri;
    }

    /// @dev A provider's consent to a pool: the total the pool may slash from it and what it has.
    struct Approval {
        uint128 maxSlash;
        uint120 slashed;
        bool approved;
    }

    /// @dev A rejection inside its challenge window: the head a quorum of contests restores, the reason
    /// the execution reports, and who contested so far. The reporter is the Rejected head's validator.
    struct Rejection {
        WorkHead previous;
        bytes32 reason;
        address[] contesters;
    }

    /// @dev Pool values a finalizeWork batch reads once and the budget and reservation it carries
    /// between keys.
    struct Settlement {
        uint256 poolId;
        uint64 disputeWindow;
        uint256 rewardPerUnit;
        uint256 validatorFee;
        uint256 budget;
        uint256 reserved;
    }

    IERC20 private immutable _token;
    IStakeManager private immutable _stakeManager;
    IComputeRegistry private immutable _registry;

    uint256 private _poolCount;
    mapping(uint256 poolId => Pool) private _pools;
    mapping(uint256 poolId => mapping(address node => Member)) private _members;
    mapping(uint256 poolId => mapping(bytes32 workKey => Work)) private _work;
    mapping(uint256 poolId => Checkpoint) private _checkpoints;
    mapping(bytes32 digest => bool) private _usedInvites;
    mapping(address account => uint256) private _rewards;
    mapping(uint256 poolId => mapping(address provider => Approval)) private _approvals;
    mapping(address provider => uint256) private _openWorkPlusOne;
    mapping(uint256 poolId => mapping(bytes32 workKey => Rejection)) private _rejections;
    uint256 private _minValidatorStake;
    uint256 private _validatorSlashAmount;

    /// @param token_ The reward token (must be the StakeManager's token: slashed stake is paid out here).
    /// @param stakeManager_ The StakeManager; this contract needs its SLASHER_ROLE.
    /// @param registry_ The ComputeRegistry.
    /// @param admin Receives DEFAULT_ADMIN_ROLE (grants VALIDATOR_ROLE).
    constructor(address token_, address stakeManager_, address registry_, address admin)
        EIP712("ProofpoolComputePool", "1")
    {
        if (token_ == address(0) || stakeManager_ == address(0) || registry_ == address(0) || admin == address(0)) {
            revert ComputePoolZeroAddress();
        }
        address stakeToken = IStakeManager(stakeManager_).token();
        if (stakeToken != token_) revert ComputePoolTokenMismatch(token_, stakeToken);
        _token = IERC20(token_);
        _stakeManager = IStakeManager(stakeManager_);
        _registry = IComputeRegistry(registry_);
        _grantRole(DEFAULT_ADMIN_ROLE, admin);
    }

    // ------------------------------------------------------------------ pools

    /// @inheritdoc IComputePool
    function createPool(PoolParams calldata params) external returns (uint256 poolId) {
        if (params.manager == address(0) || params.treasury == address(0)) revert ComputePoolZeroAddress();
        uint64 period = _stakeManager.unbondingPeriod();
        if (params.disputeWindow >= period) revert ComputePoolInvalidDisputeWindow(params.disputeWindow, period);
        if (params.validatorSlashShareBps > _BPS) revert ComputePoolInvalidSlashShare(params.validatorSlashShareBps);
        _checkChallengeRules(params, period);

        poolId = ++_poolCount;
        Pool storage pool = _pools[poolId];
        pool.creator = _msgSender();
        pool.status = PoolStatus.Created;
        pool.disputeWindow = params.disputeWindow;
        pool.validatorSlashShareBps = params.validatorSlashShareBps;
        pool.manager = params.manager;
        pool.challengeWindow = params.challengeWindow;
        pool.contestQuorum = params.contestQuorum;
        pool.treasury = params.treasury;
        pool.rewardPerUnit = params.rewardPerUnit;
        pool.validatorFee = params.validatorFee;
        pool.slashAmount = params.slashAmount;
        pool.modelUri = params.modelUri;
        emit PoolCreated(
            poolId,
            _msgSender(),
            params.manager,
            params.treasury,
            params.modelUri,
            params.rewardPerUnit,
            params.validatorFee,
            params.slashAmount,
            params.disputeWindow,
            params.validatorSlashShareBps
        );
        emit PoolChallengeRules(poolId, params.challengeWindow, params.contestQuorum);
    }

    /// @inheritdoc IComputePool
    function fundPool(uint256 poolId, uint256 amount) external nonReentrant {
        Pool storage pool = _existingPool(poolId);
        if (pool.status == PoolStatus.Closed) revert ComputePoolClosed(poolId);
        if (amount == 0) revert ComputePoolZeroAmount();
        uint256 budget = pool.budget + amount;
        pool.budget = budget;
        emit PoolFunded(poolId, _msgSender(), amount, budget);
        _token.safeTransferFrom(_msgSender(), address(this), amount);
    }

    /// @inheritdoc IComputePool
    function startPool(uint256 poolId) external {
        Pool storage pool = _creatorOrManagerPool(poolId);
        if (pool.status != PoolStatus.Created) revert ComputePoolAlreadyStarted(poolId, pool.status);
        pool.status = PoolStatus.Active;
        emit PoolStarted(poolId, _msgSender());
    }

    /// @inheritdoc IComputePool
    function closePool(uint256 poolId) external {
        Pool storage pool = _creatorOrManagerPool(poolId);
        if (pool.status == PoolStatus.Closed) revert ComputePoolClosed(poolId);
        pool.status = PoolStatus.Closed;
        pool.closedAt = uint40(block.timestamp);
        emit PoolClosed(poolId, _msgSender());
    }

    /// @inheritdoc IComputePool
    function refundBudget(uint256 poolId) external nonReentrant returns (uint256 amount) {
        Pool storage pool = _creatorOrManagerPool(poolId);
        _checkWindUpOver(pool, poolId);
        uint256 budget = pool.budget;
        amount = budget - pool.reserved;
        if (amount == 0) revert ComputePoolNothingToRefund(poolId);
        budget -= amount;
        pool.budget = budget;
        address creator = pool.creator;
        emit PoolBudgetRefunded(poolId, creator, amount, budget);
        _token.safeTransfer(creator, amount);
    }

    // ------------------------------------------------------------------ membership

    /// @inheritdoc IComputePool
    function approvePool(uint256 poolId, uint256 maxSlash) external {
        address provider = _msgSender();
        if (!_registry.isProvider(provider)) revert ComputePoolNotProvider(provider);
        Pool storage pool = _existingPool(poolId);
        if (pool.status == PoolStatus.Closed) revert ComputePoolClosed(poolId);
        if (maxSlash < pool.slashAmount) revert ComputePoolApprovalBelowSlash(poolId, maxSlash, pool.slashAmount);
        Approval storage approval = _approvals[poolId][provider];
        uint256 current = approval.maxSlash;
        if (maxSlash < current) revert ComputePoolApprovalLowered(poolId, current, maxSlash);
        approval.maxSlash = SafeCast.toUint128(maxSlash);
        approval.approved = true;
        // The open-work counter is stored plus one, so it never returns to zero: every submitWork
        // then updates a non-zero slot (about 5,000 gas) instead of paying 20,000 to set it again.
        if (_openWorkPlusOne[provider] == 0) _openWorkPlusOne[provider] = 1;
        emit PoolApproved(poolId, provider, maxSlash);
    }

    /// @inheritdoc IComputePool
    function revokePoolApproval(uint256 poolId) external {
        address provider = _msgSender();
        Approval storage approval = _approvals[poolId][provider];
        if (!approval.approved) revert ComputePoolNotApproved(poolId, provider);
        approval.approved = false;
        emit PoolApprovalRevoked(poolId, provider);
    }

    /// @inheritdoc IComputePool
    function joinPool(uint256 poolId, address node, uint256 nonce, uint256 expiry, bytes calldata signature)
        external
    {
        bytes32 digest = _checkInvite(poolId, node, nonce, expiry, signature);
        Member storage member = _members[poolId][node];
        address provider = _checkJoin(poolId, node, member);
        _usedInvites[digest] = true;
        member.provider = provider;
        member.state = MemberState.Active;
        member.since = uint40(block.timestamp);
        emit NodeJoined(poolId, node, provider, digest);
    }

    /// @inheritdoc IComputePool
    function leavePool(uint256 poolId, address node) external {
        Member storage member = _activeMember(poolId, node);
        address provider = member.provider;
        if (provider != _msgSender()) revert ComputePoolNotNodeProvider(poolId, node, _msgSender());
        member.state = MemberState.Left;
        member.since = uint40(block.timestamp);
        emit NodeLeft(poolId, node, provider);
    }

    /// @inheritdoc IComputePool
    function ejectNode(uint256 poolId, address node) external {
        _onlyManager(poolId);
        _eject(poolId, node, _activeMember(poolId, node));
    }

    /// @inheritdoc IComputePool
    function blacklistNode(uint256 poolId, address node) external {
        _onlyManager(poolId);
        Member storage member = _members[poolId][node];
        if (member.blacklisted) revert ComputePoolNodeAlreadyBlacklisted(poolId, node);
        member.blacklisted = true;
        emit NodeBlacklisted(poolId, node);
        if (member.state == MemberState.Active) _eject(poolId, node, member);
    }

    // ------------------------------------------------------------------ work

    /// @inheritdoc IComputePool
    function submitWork(uint256 poolId, address node, bytes32 workKey, uint64 workUnits, uint32 modelVersion)
        external
    {
        if (_msgSender() != node) revert ComputePoolCallerNotNode(node, _msgSender());
        PoolStatus status = _pools[poolId].status;
        if (status != PoolStatus.Active) revert ComputePoolNotActive(poolId, status);
        Member memory member = _members[poolId][node];
        if (member.state != MemberState.Active) revert ComputePoolNotMember(poolId, node);
        if (_registry.activeNodeProvider(node) != member.provider) revert ComputePoolNodeInactive(node);
        if (workUnits == 0) revert ComputePoolZeroWorkUnits(poolId, workKey);
        Work storage work = _work[poolId][workKey];
        if (work.head.status != WorkStatus.None) revert ComputePoolDuplicateWork(poolId, workKey);

        uint40 now_ = uint40(block.timestamp);
        work.head = WorkHead({status: WorkStatus.Pending, validator: address(0), statusSince: now_, submittedAt: now_});
        work.body = WorkBody({node: node, workUnits: workUnits, modelVersion: modelVersion});
        ++_openWorkPlusOne[member.provider];
        emit WorkSubmitted(poolId, workKey, node, member.provider, workUnits, modelVersion);
    }

    /// @inheritdoc IComputePool
    function attestWork(uint256 poolId, bytes32[] calldata workKeys, bytes32 evidenceHash)
        external
        onlyRole(VALIDATOR_ROLE)
    {
        uint256 count = workKeys.length;
        if (count == 0) revert ComputePoolEmptyBatch(poolId);
        address validator = _msgSender();
        _checkValidatorStake(validator);
        emit AttestationEvidence(poolId, validator, evidenceHash, count);
        (uint256 units, uint256 accepted) = _attestEach(poolId, workKeys, validator);
        _reserve(poolId, units, accepted);
    }

    /// @inheritdoc IComputePool
    function invalidateWork(uint256 poolId, bytes32 workKey, bytes32 reason, bytes32 evidenceHash)
        external
        onlyRole(VALIDATOR_ROLE)
        nonReentrant
    {
        Pool storage pool = _pools[poolId];
        Work storage work = _work[poolId][workKey];
        WorkHead memory previous = work.head;
        if (previous.status == WorkStatus.Accepted) {
            uint64 closedAt = uint64(previous.statusSince) + pool.disputeWindow;
            if (block.timestamp >= closedAt) revert ComputePoolDisputeWindowClosed(poolId, workKey, closedAt);
        } else if (previous.status != WorkStatus.Pending) {
            revert ComputePoolWorkNotDisputable(poolId, workKey, previous.status);
        }
        address validator = _msgSender();
        _checkNotOwnWork(poolId, workKey, work.body.node, validator);
        _checkValidatorStake(validator);
        uint64 window = pool.challengeWindow;
        emit WorkRejected(poolId, workKey, validator, reason, evidenceHash, uint64(block.timestamp) + window);
        if (window == 0) {
            _invalidate(pool, poolId, workKey, previous, validator, reason);
            return;
        }
        work.head = WorkHead({
            status: WorkStatus.Rejected,
            validator: validator,
            statusSince: uint40(block.timestamp),
            submittedAt: previous.submittedAt
        });
        Rejection storage rejection = _rejections[poolId][workKey];
        rejection.previous = previous;
        rejection.reason = reason;
    }

    /// @inheritdoc IComputePool
    function contestRejection(uint256 poolId, bytes32 workKey, bytes32 evidenceHash)
        external
        onlyRole(VALIDATOR_ROLE)
        nonReentrant
    {
        Work storage work = _work[poolId][workKey];
        WorkHead memory head = _rejectedHead(poolId, workKey, work);
        Pool storage pool = _pools[poolId];
        uint64 closedAt = uint64(head.statusSince) + pool.challengeWindow;
        if (block.timestamp >= closedAt) revert ComputePoolChallengeWindowClosed(poolId, workKey, closedAt);
        address validator = _msgSender();
        if (validator == head.validator) revert ComputePoolSelfVerdict(poolId, workKey, validator);
        _checkNotOwnWork(poolId, workKey, work.body.node, validator);
        _checkValidatorStake(validator);
        Rejection storage rejection = _rejections[poolId][workKey];
        address[] storage contesters = rejection.contesters;
        uint256 count = contesters.length;
        for (uint256 i = 0; i < count; ++i) {
            if (contesters[i] == validator) revert ComputePoolAlreadyContested(poolId, workKey, validator);
        }
        contesters.push(validator);
        ++count;
        emit RejectionContested(poolId, workKey, validator, evidenceHash, count);
        if (count < pool.contestQuorum) return;

        WorkHead memory previous = rejection.previous;
        address[] memory paid = contesters;
        delete _rejections[poolId][workKey];
        work.head = previous;
        emit RejectionOverturned(poolId, workKey, head.validator, previous.status);
        _slashValidator(poolId, workKey, head.validator, paid);
    }

    /// @inheritdoc IComputePool
    function executeRejection(uint256 poolId, bytes32 workKey) external nonReentrant {
        Work storage work = _work[poolId][workKey];
        WorkHead memory head = _rejectedHead(poolId, workKey, work);
        Pool storage pool = _pools[poolId];
        uint64 executableAt = uint64(head.statusSince) + pool.challengeWindow;
        if (block.timestamp < executableAt) revert ComputePoolChallengeWindowOpen(poolId, workKey, executableAt);
        Rejection storage rejection = _rejections[poolId][workKey];
        WorkHead memory previous = rejection.previous;
        bytes32 reason = rejection.reason;
        delete _rejections[poolId][workKey];
        _invalidate(pool, poolId, workKey, previous, head.validator, reason);
    }

    /// @inheritdoc IComputePool
    function setValidatorStakeParams(uint256 minValidatorStake, uint256 validatorSlashAmount)
        external
        onlyRole(DEFAULT_ADMIN_ROLE)
    {
        if (validatorSlashAmount > minValidatorStake) {
            revert ComputePoolInvalidValidatorSlash(minValidatorStake, validatorSlashAmount);
        }
        _minValidatorStake = minValidatorStake;
        _validatorSlashAmount = validatorSlashAmount;
        emit ValidatorStakeParamsUpdated(minValidatorStake, validatorSlashAmount);
    }

    /// @inheritdoc IComputePool
    function finalizeWork(uint256 poolId, bytes32[] calldata workKeys) external {
        uint256 count = workKeys.length;
        if (count == 0) revert ComputePoolEmptyBatch(poolId);
        Pool storage pool = _pools[poolId];
        Settlement memory settlement = Settlement({
            poolId: poolId,
            disputeWindow: pool.disputeWindow,
            rewardPerUnit: pool.rewardPerUnit,
            validatorFee: pool.validatorFee,
            budget: pool.budget,
            reserved: pool.reserved
        });
        mapping(bytes32 => Work) storage works = _work[poolId];
        mapping(address => Member) storage members = _members[poolId];
        for (uint256 i = 0; i < count; ++i) {
            bytes32 workKey = workKeys[i];
            _finalizeOne(settlement, workKey, works[workKey], members);
        }
        pool.budget = settlement.budget;
        pool.reserved = settlement.reserved;
    }

    /// @inheritdoc IComputePool
    function expireWork(uint256 poolId, bytes32[] calldata workKeys) external {
        uint256 count = workKeys.length;
        if (count == 0) revert ComputePoolEmptyBatch(poolId);
        _checkWindUpOver(_pools[poolId], poolId);
        mapping(bytes32 => Work) storage works = _work[poolId];
        for (uint256 i = 0; i < count; ++i) {
            bytes32 workKey = workKeys[i];
            Work storage work = works[workKey];
            WorkStatus status = work.head.status;
            if (status != WorkStatus.Pending) {
                if (status == WorkStatus.None) revert ComputePoolWorkNotPending(poolId, workKey, status);
                emit WorkSkipped(poolId, workKey, status);
                continue;
            }
            work.head.status = WorkStatus.Expired;
            work.head.statusSince = uint40(block.timestamp);
            address node = work.body.node;
            --_openWorkPlusOne[_members[poolId][node].provider];
            emit WorkExpired(poolId, workKey, node);
        }
    }

    /// @inheritdoc IComputePool
    function withdrawRewards() external nonReentrant returns (uint256 amount) {
        address account = _msgSender();
        amount = _rewards[account];
        if (amount == 0) revert ComputePoolNothingToWithdraw(account);
        _rewards[account] = 0;
        emit RewardsWithdrawn(account, amount);
        _token.safeTransfer(account, amount);
    }

    // ------------------------------------------------------------------ checkpoints

    /// @inheritdoc IComputePool
    function publishCheckpoint(uint256 poolId, uint32 version, bytes32 manifestSha256, string calldata uri)
        external
    {
        _onlyManager(poolId);
        Checkpoint storage checkpoint = _checkpoints[poolId];
        if (checkpoint.publishedAt != 0 && version <= checkpoint.version) {
            revert ComputePoolCheckpointVersionNotIncreasing(poolId, checkpoint.version, version);
        }
        checkpoint.version = version;
        checkpoint.publishedAt = uint40(block.timestamp);
        checkpoint.manifestSha256 = manifestSha256;
        checkpoint.uri = uri;
        emit CheckpointPublished(poolId, version, manifestSha256, uri);
    }

    // ------------------------------------------------------------------ views

    /// @inheritdoc IComputePool
    function getPool(uint256 poolId) external view returns (PoolInfo memory) {
        Pool storage pool = _pools[poolId];
        return PoolInfo({
            creator: pool.creator,
            manager: pool.manager,
            treasury: pool.treasury,
            status: pool.status,
            modelUri: pool.modelUri,
            rewardPerUnit: pool.rewardPerUnit,
            validatorFee: pool.validatorFee,
            slashAmount: pool.slashAmount,
            disputeWindow: pool.disputeWindow,
            validatorSlashShareBps: pool.validatorSlashShareBps,
            budget: pool.budget
        });
    }

    /// @inheritdoc IComputePool
    function poolCount() external view returns (uint256) {
        return _poolCount;
    }

    /// @inheritdoc IComputePool
    function getMember(uint256 poolId, address node)
        external
        view
        returns (address provider, MemberState state, bool blacklisted, uint64 since)
    {
        Member memory member = _members[poolId][node];
        return (member.provider, member.state, member.blacklisted, member.since);
    }

    /// @inheritdoc IComputePool
    function getWork(uint256 poolId, bytes32 workKey)
        external
        view
        returns (
            address node,
            address provider,
            WorkStatus status,
            uint64 workUnits,
            uint32 modelVersion,
            uint64 submittedAt,
            uint64 statusSince,
            address validator
        )
    {
        Work memory work = _work[poolId][workKey];
        node = work.body.node;
        provider = _members[poolId][node].provider;
        status = work.head.status;
        workUnits = work.body.workUnits;
        modelVersion = work.body.modelVersion;
        submittedAt = work.head.submittedAt;
        statusSince = work.head.statusSince;
        validator = work.head.validator;
    }

    /// @inheritdoc IComputePool
    function poolApproval(uint256 poolId, address provider)
        external
        view
        returns (uint256 maxSlash, uint256 slashed, bool approved)
    {
        Approval memory approval = _approvals[poolId][provider];
        return (approval.maxSlash, approval.slashed, approval.approved);
    }

    /// @inheritdoc IWorkLedger
    function openWork(address provider) external view returns (uint256) {
        uint256 stored = _openWorkPlusOne[provider];
        return stored == 0 ? 0 : stored - 1;
    }

    /// @inheritdoc IComputePool
    function challengeRules(uint256 poolId) external view returns (uint64 challengeWindow, uint16 contestQuorum) {
        Pool storage pool = _pools[poolId];
        return (pool.challengeWindow, pool.contestQuorum);
    }

    /// @inheritdoc IComputePool
    function getRejection(uint256 poolId, bytes32 workKey)
        external
        view
        returns (
            address validator,
            bytes32 reason,
            uint64 executableAt,
            WorkStatus previous,
            address[] memory contesters
        )
    {
        WorkHead memory head = _work[poolId][workKey].head;
        if (head.status != WorkStatus.Rejected) return (address(0), bytes32(0), 0, WorkStatus.None, contesters);
        Rejection storage rejection = _rejections[poolId][workKey];
        return (
            head.validator,
            rejection.reason,
            uint64(head.statusSince) + _pools[poolId].challengeWindow,
            rejection.previous.status,
            rejection.contesters
        );
    }

    /// @inheritdoc IComputePool
    function budgetReserved(uint256 poolId) external view returns (uint256 reserved, uint64 windUpEndsAt) {
        Pool storage pool = _pools[poolId];
        uint64 closedAt = pool.closedAt;
        return (pool.reserved, closedAt == 0 ? 0 : closedAt + pool.disputeWindow);
    }

    /// @inheritdoc IComputePool
    function validatorStakeParams() external view returns (uint256 minValidatorStake, uint256 validatorSlashAmount) {
        return (_minValidatorStake, _validatorSlashAmount);
    }

    /// @inheritdoc IComputePool
    function rewardBalance(address account) external view returns (uint256) {
        return _rewards[account];
    }

    /// @inheritdoc IComputePool
    function isBlacklisted(uint256 poolId, address node) external view returns (bool) {
        return _members[poolId][node].blacklisted;
    }

    /// @inheritdoc IComputePool
    function latestCheckpoint(uint256 poolId)
        external
        view
        returns (uint32 version, bytes32 manifestSha256, string memory uri, uint64 publishedAt)
    {
        Checkpoint storage checkpoint = _checkpoints[poolId];
        return (checkpoint.version, checkpoint.manifestSha256, checkpoint.uri, checkpoint.publishedAt);
    }

    /// @inheritdoc IComputePool
    function inviteDigest(uint256 poolId, address node, uint256 nonce, uint256 expiry)
        external
        view
        returns (bytes32)
    {
        return _inviteDigest(poolId, node, nonce, expiry);
    }

    /// @inheritdoc IComputePool
    function isInviteUsed(bytes32 digest) external view returns (bool) {
        return _usedInvites[digest];
    }

    /// @inheritdoc IComputePool
    function token() external view returns (address) {
        return address(_token);
    }

    /// @inheritdoc IComputePool
    function stakeManager() external view returns (address) {
        return address(_stakeManager);
    }

    /// @inheritdoc IComputePool
    function registry() external view returns (address) {
        return address(_registry);
    }

    // ------------------------------------------------------------------ internals

    function _existingPool(uint256 poolId) private view returns (Pool storage pool) {
        pool = _pools[poolId];
        if (pool.status == PoolStatus.None) revert ComputePoolUnknownPool(poolId);
    }

    function _creatorOrManagerPool(uint256 poolId) private view returns (Pool storage pool) {
        pool = _existingPool(poolId);
        if (_msgSender() != pool.creator && _msgSender() != pool.manager) {
            revert ComputePoolNotCreatorOrManager(poolId, _msgSender());
        }
    }

    function _onlyManager(uint256 poolId) private view {
        if (_msgSender() != _pools[poolId].manager) revert ComputePoolNotManager(poolId, _msgSender());
    }

    function _activeMember(uint256 poolId, address node) private view returns (Member storage member) {
        member = _members[poolId][node];
        if (member.state != MemberState.Active) revert ComputePoolNotMember(poolId, node);
    }

    function _eject(uint256 poolId, address node, Member storage member) private {
        member.state = MemberState.Ejected;
        member.since = uint40(block.timestamp);
        emit NodeEjected(poolId, node, member.provider, false);
    }

    function _inviteDigest(uint256 poolId, address node, uint256 nonce, uint256 expiry)
        private
        view
        returns (bytes32)
    {
        return _hashTypedDataV4(keccak256(abi.encode(INVITE_TYPEHASH, poolId, node, nonce, expiry)));
    }

    /// @dev Expiry first, then single use, then the signer; returns the invite digest.
    function _checkInvite(uint256 poolId, address node, uint256 nonce, uint256 expiry, bytes calldata signature)
        private
        view
        returns (bytes32 digest)
    {
        if (block.timestamp > expiry) revert ComputePoolInviteExpired(poolId, node, expiry);
        digest = _inviteDigest(poolId, node, nonce, expiry);
        if (_usedInvites[digest]) revert ComputePoolInviteAlreadyUsed(digest);
        address manager = _pools[poolId].manager;
        (address recovered, ECDSA.RecoverError err, ) = ECDSA.tryRecoverCalldata(digest, signature);
        // A successful recovery never yields address(0), so an unknown pool (manager 0) is refused too.
        if (err != ECDSA.RecoverError.NoError || recovered != manager) {
            revert ComputePoolInvalidInviteSigner(poolId, recovered, manager);
        }
    }

    /// @dev Blacklist and slash, registry and caller, approval, pool status, membership; returns the provider.
    function _checkJoin(uint256 poolId, address node, Member storage member) private view returns (address provider) {
        Member memory current = member;
        if (current.blacklisted) revert ComputePoolNodeBlacklisted(poolId, node);
        if (current.state == MemberState.Slashed) revert ComputePoolNodeSlashed(poolId, node);
        provider = _registry.activeNodeProvider(node);
        if (provider == address(0)) revert ComputePoolNodeInactive(node);
        address caller = _msgSender();
        if (caller != provider && caller != node) revert ComputePoolNotNodeProvider(poolId, node, caller);
        if (!_approvals[poolId][provider].approved) revert ComputePoolNotApproved(poolId, provider);
        PoolStatus status = _pools[poolId].status;
        if (status != PoolStatus.Active) revert ComputePoolNotActive(poolId, status);
        if (current.state == MemberState.Active) revert ComputePoolAlreadyMember(poolId, node);
        if (current.provider != address(0) && current.provider != provider) {
            revert ComputePoolProviderMismatch(poolId, node, current.provider, provider);
        }
    }

    /// @dev Challenge rules a pool may not be created with: a window that lets a verdict's stake be
    /// withdrawn before the verdict can be overturned, or a quorum outside 1.._MAX_QUORUM.
    function _checkChallengeRules(PoolParams calldata params, uint64 period) private pure {
        uint64 window = params.challengeWindow;
        uint16 quorum = params.contestQuorum;
        bool badQuorum = window != 0 && (quorum == 0 || quorum > _MAX_QUORUM);
        // disputeWindow < period is checked first, so the subtraction cannot underflow.
        if (badQuorum || window >= period - params.disputeWindow) {
            revert ComputePoolInvalidChallengeRules(window, quorum, period);
        }
    }

    /// @dev Accepts the Pending keys of an attestWork batch; returns their work units and number.
    function _attestEach(uint256 poolId, bytes32[] calldata workKeys, address validator)
        private
        returns (uint256 units, uint256 accepted)
    {
        mapping(bytes32 => Work) storage works = _work[poolId];
        mapping(address => Member) storage members = _members[poolId];
        uint40 now_ = uint40(block.timestamp);
        for (uint256 i = 0; i < workKeys.length; ++i) {
            bytes32 workKey = workKeys[i];
            Work storage work = works[workKey];
            WorkHead storage head = _checkAttestable(poolId, workKey, work, members, validator);
            WorkStatus status = head.status;
            if (status != WorkStatus.Pending) {
                emit WorkSkipped(poolId, workKey, status);
                continue;
            }
            head.status = WorkStatus.Accepted;
            head.validator = validator;
            head.statusSince = now_;
            units += work.body.workUnits;
            ++accepted;
            emit WorkAttested(poolId, workKey, validator);
        }
    }

    /// @dev Reserves the rewards and fees of `accepted` newly attested keys of `units` work units in
    /// total; reverts when the unreserved budget cannot cover them.
    function _reserve(uint256 poolId, uint256 units, uint256 accepted) private {
        if (accepted == 0) return;
        Pool storage pool = _pools[poolId];
        uint256 needed = units * pool.rewardPerUnit + accepted * pool.validatorFee;
        uint256 reserved = pool.reserved;
        uint256 budget = pool.budget;
        if (reserved + needed > budget) revert ComputePoolBudgetExhausted(poolId, needed, budget - reserved);
        pool.reserved = reserved + needed;
    }

    /// @dev Reverts unless the pool is Closed and its wind-up (one dispute window after closing, for
    /// validators to judge the work submitted before) is over.
    function _checkWindUpOver(Pool storage pool, uint256 poolId) private view {
        PoolStatus status = pool.status;
        if (status != PoolStatus.Closed) revert ComputePoolNotClosed(poolId, status);
        uint64 endsAt = uint64(pool.closedAt) + pool.disputeWindow;
        if (block.timestamp < endsAt) revert ComputePoolWindUpNotOver(poolId, endsAt);
    }

    /// @dev Reverts unless `validator` has the minimum validator stake active in the StakeManager.
    function _checkValidatorStake(address validator) private view {
        uint256 required = _minValidatorStake;
        if (required == 0) return;
        uint256 stake = _stakeManager.activeStake(validator);
        if (stake < required) revert ComputePoolValidatorUnderstaked(validator, stake, required);
    }

    /// @dev Reverts when `validator` is the submitting node or its provider.
    function _checkNotOwnWork(uint256 poolId, bytes32 workKey, address node, address validator) private view {
        if (validator == node || validator == _members[poolId][node].provider) {
            revert ComputePoolSelfVerdict(poolId, workKey, validator);
        }
    }

    function _rejectedHead(uint256 poolId, bytes32 workKey, Work storage work)
        private
        view
        returns (WorkHead memory head)
    {
        head = work.head;
        if (head.status != WorkStatus.Rejected) revert ComputePoolWorkNotRejected(poolId, workKey, head.status);
    }

    /// @dev Marks the work Invalid as `reporter`'s verdict, ejects and slashes the node's provider, and
    /// slashes the attester when `previous` was an attestation.
    function _invalidate(
        Pool storage pool,
        uint256 poolId,
        bytes32 workKey,
        WorkHead memory previous,
        address reporter,
        bytes32 reason
    ) private {
        Work storage work = _work[poolId][workKey];
        work.head = WorkHead({
            status: WorkStatus.Invalid,
            validator: reporter,
            statusSince: uint40(block.timestamp),
            submittedAt: previous.submittedAt
        });
        address node = work.body.node;
        Member storage member = _members[poolId][node];
        address provider = member.provider;
        --_openWorkPlusOne[provider];
        emit WorkInvalidated(poolId, workKey, node, reporter, reason);

        if (member.state != MemberState.Slashed) {
            member.state = MemberState.Slashed;
            member.since = uint40(block.timestamp);
            emit NodeEjected(poolId, node, provider, true);
        }
        _distributeSlash(pool, poolId, workKey, provider, reporter);
        if (previous.status == WorkStatus.Accepted) {
            pool.reserved -= uint256(work.body.workUnits) * pool.rewardPerUnit + pool.validatorFee;
            address[] memory paid = new address[](1);
            paid[0] = reporter;
            _slashValidator(poolId, workKey, previous.validator, paid);
        }
    }

    /// @dev Takes the validator slash from `validator` and credits it evenly to `paid` (the remainder
    /// of the division to the first). Nothing happens while the slash amount is 0.
    function _slashValidator(uint256 poolId, bytes32 workKey, address validator, address[] memory paid) private {
        uint256 amount = _validatorSlashAmount;
        if (amount == 0) return;
        uint256 slashed = _stakeManager.slash(validator, amount);
        uint256 count = paid.length;
        uint256 share = slashed / count;
        for (uint256 i = 0; i < count; ++i) {
            uint256 credited = i == 0 ? slashed - share * (count - 1) : share;
            _rewards[paid[i]] += credited;
            emit ValidatorSlashed(poolId, workKey, validator, paid[i], credited);
        }
    }

    /// @dev A submitted key whose node and provider are not `validator`; returns its head.
    function _checkAttestable(
        uint256 poolId,
        bytes32 workKey,
        Work storage work,
        mapping(address => Member) storage members,
        address validator
    ) private view returns (WorkHead storage head) {
        head = work.head;
        if (head.status == WorkStatus.None) revert ComputePoolWorkNotPending(poolId, workKey, WorkStatus.None);
        address node = work.body.node;
        if (validator == node || validator == members[node].provider) {
            revert ComputePoolSelfVerdict(poolId, workKey, validator);
        }
    }

    function _finalizeOne(
        Settlement memory settlement,
        bytes32 workKey,
        Work storage work,
        mapping(address => Member) storage members
    ) private {
        WorkHead storage head = work.head;
        WorkStatus status = head.status;
        if (status != WorkStatus.Accepted) {
            if (status == WorkStatus.None || status == WorkStatus.Pending) {
                revert ComputePoolWorkNotAccepted(settlement.poolId, workKey, status);
            }
            emit WorkSkipped(settlement.poolId, workKey, status); // settled by an earlier transaction
            return;
        }
        uint64 finalizableAt = uint64(head.statusSince) + settlement.disputeWindow;
        if (block.timestamp < finalizableAt) {
            revert ComputePoolDisputeWindowOpen(settlement.poolId, workKey, finalizableAt);
        }
        WorkBody memory body = work.body;
        Member storage member = members[body.node];
        --_openWorkPlusOne[member.provider];
        if (member.state == MemberState.Slashed) {
            head.status = WorkStatus.Forfeited;
            head.statusSince = uint40(block.timestamp);
            settlement.reserved -= uint256(body.workUnits) * settlement.rewardPerUnit + settlement.validatorFee;
            emit WorkForfeited(settlement.poolId, workKey, body.node);
            return;
        }
        _pay(settlement, workKey, body, member.provider, head.validator);
        head.status = WorkStatus.Finalized;
        head.statusSince = uint40(block.timestamp);
    }

    /// @dev Takes reward + fee of one submission from the batch budget and credits provider and validator.
    function _pay(
        Settlement memory settlement,
        bytes32 workKey,
        WorkBody memory body,
        address provider,
        address validator
    ) private {
        uint256 reward = uint256(body.workUnits) * settlement.rewardPerUnit;
        uint256 fee = settlement.validatorFee;
        uint256 needed = reward + fee;
        if (needed > settlement.budget) {
            revert ComputePoolBudgetExhausted(settlement.poolId, needed, settlement.budget);
        }
        unchecked {
            // needed <= budget, checked above.
            settlement.budget -= needed;
        }
        // Reserved when the work was attested, with the same pool terms.
        settlement.reserved -= needed;
        _rewards[provider] += reward;
        _rewards[validator] += fee;
        emit WorkFinalized(settlement.poolId, workKey, body.node, provider, reward, validator, fee);
    }

    function _distributeSlash(
        Pool storage pool,
        uint256 poolId,
        bytes32 workKey,
        address provider,
        address validator
    ) private {
        Approval storage approval = _approvals[poolId][provider];
        uint256 room = approval.maxSlash - approval.slashed;
        uint256 amount = pool.slashAmount < room ? pool.slashAmount : room;
        uint256 slashed = amount == 0 ? 0 : _stakeManager.slash(provider, amount);
        // slashed <= amount <= room, so the sum stays <= maxSlash < 2^128.
        approval.slashed += uint120(slashed);
        uint256 validatorShare = (slashed * pool.validatorSlashShareBps) / _BPS;
        uint256 treasuryShare = slashed - validatorShare;
        address treasury = pool.treasury;
        _rewards[validator] += validatorShare;
        emit SlashDistributed(poolId, workKey, provider, validator, validatorShare, treasury, treasuryShare);
        if (treasuryShare > 0) _token.safeTransfer(treasury, treasuryShare);
    }
}

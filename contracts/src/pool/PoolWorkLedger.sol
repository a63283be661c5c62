// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {SafeERC20} from "@openzeppelin/contracts/token/ERC20/utils/SafeERC20.sol";

import {IWorkLedger} from "../interfaces/IWorkLedger.sol";
import {IComputePool} from "../interfaces/IComputePool.sol";
import {PoolMembership} from "./PoolMembership.sol";

/// @title PoolWorkLedger
/// @notice Submissions and their verdicts: attestation with its budget reservation, rejection with its
/// challenge window, contests and their quorum, execution, finalization and payment, expiry after a
/// closed pool's wind-up; the validators' stake terms and the open-work count the StakeManager asks.
abstract contract PoolWorkLedger is PoolMembership {
    using SafeERC20 for IERC20;

    mapping(uint256 poolId => mapping(bytes32 workKey => Work)) internal _work;
    mapping(uint256 poolId => mapping(bytes32 workKey => Rejection)) internal _rejections;
    uint256 internal _minValidatorStake;
    uint256 internal _validatorSlashAmount;

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

    /// @inheritdoc IWorkLedger
    function openWork(address provider) external view returns (uint256) {
        uint256 stored = _openWorkPlusOne[provider];
        return stored == 0 ? 0 : stored - 1;
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
    function validatorStakeParams() external view returns (uint256 minValidatorStake, uint256 validatorSlashAmount) {
        return (_minValidatorStake, _validatorSlashAmount);
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

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

    /// @notice Most files one submitWorkBundle records (the file count lives in one byte of WorkHead).
    uint256 public constant MAX_BUNDLE_FILES = 128;

    mapping(uint256 poolId => mapping(bytes32 workKey => Work)) internal _work;
    mapping(uint256 poolId => mapping(bytes32 workKey => Rejection)) internal _rejections;
    uint256 internal _minValidatorStake;
    uint256 internal _validatorSlashAmount;

    /// @inheritdoc IComputePool
    function submitWork(uint256 poolId, address node, bytes32 workKey, uint64 workUnits, uint32 modelVersion)
        external
    {
        address provider = _checkSubmitter(poolId, node);
        if (workUnits == 0) revert ComputePoolZeroWorkUnits(poolId, workKey);
        _record(poolId, workKey, node, provider, workUnits, modelVersion, 1);
        emit WorkSubmitted(poolId, workKey, node, provider, workUnits, modelVersion);
    }

    /// @inheritdoc IComputePool
    /// @dev The key's preimage and the event's data are laid out in memory by hand: the files are
    /// copied from calldata once for the hash and once for the event (Solidity's encoders of calldata
    /// arrays would not fit in the contract size limit). The arrays were bounds-checked by the ABI
    /// decoder and every unit count range-checked by {_bundleUnits} before they are copied.
    function submitWorkBundle(
        uint256 poolId,
        address node,
        bytes32[] calldata fileKeys,
        uint64[] calldata fileUnits,
        uint32 modelVersion
    ) external returns (bytes32 workKey) {
        address provider = _checkSubmitter(poolId, node);
        uint64 units = _bundleUnits(poolId, fileKeys, fileUnits);
        uint256 files = fileKeys.length;
        uint256 data;
        uint256 size;
        assembly ("memory-safe") {
            // Event data, the ABI encoding of (provider, units, modelVersion, fileKeys, fileUnits):
            // 5 head words, then fileKeys (length, words), then fileUnits (length, words).
            data := mload(0x40)
            let arrayBytes := shl(5, files)
            let keysAt := add(data, 0xc0)
            let unitsLengthAt := add(keysAt, arrayBytes)
            calldatacopy(keysAt, fileKeys.offset, arrayBytes)
            // abi.encodePacked(fileKeys, fileUnits): the keys' words, then the units' words.
            calldatacopy(unitsLengthAt, fileUnits.offset, arrayBytes)
            workKey := keccak256(keysAt, shl(1, arrayBytes))
            calldatacopy(add(unitsLengthAt, 0x20), fileUnits.offset, arrayBytes)
            mstore(unitsLengthAt, files)
            mstore(add(data, 0xa0), files)
            mstore(data, provider)
            mstore(add(data, 0x20), units)
            mstore(add(data, 0x40), modelVersion)
            mstore(add(data, 0x60), 0xa0)
            mstore(add(data, 0x80), add(0xc0, arrayBytes))
            size := add(0xe0, shl(1, arrayBytes))
            mstore(0x40, add(data, size))
        }
        // The count is <= MAX_BUNDLE_FILES < 256, checked by _bundleUnits.
        _record(poolId, workKey, node, provider, units, modelVersion, uint8(files));
        bytes32 topic = WorkBundleSubmitted.selector;
        assembly ("memory-safe") {
            log4(data, size, topic, poolId, workKey, node)
        }
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
        WorkHead storage head = work.head;
        WorkStatus status = head.status;
        if (status == WorkStatus.Accepted) {
            uint64 closedAt = uint64(head.statusSince) + pool.disputeWindow;
            if (block.timestamp >= closedAt) revert ComputePoolDisputeWindowClosed(poolId, workKey, closedAt);
        } else if (status != WorkStatus.Pending) {
            revert ComputePoolWorkNotDisputable(poolId, workKey, status);
        }
        address validator = _msgSender();
        _checkNotOwnWork(poolId, workKey, work.body.node, validator);
        _checkValidatorStake(validator);
        uint64 window = pool.challengeWindow;
        emit WorkRejected(poolId, workKey, validator, reason, evidenceHash, uint64(block.timestamp) + window);
        if (window == 0) {
            _invalidate(pool, poolId, workKey, status, head.validator, validator, reason);
            return;
        }
        Rejection storage rejection = _rejections[poolId][workKey];
        _copyHead(head, rejection.previous);
        rejection.reason = reason;
        _setHead(head, WorkStatus.Rejected, validator);
    }

    /// @inheritdoc IComputePool
    function contestRejection(uint256 poolId, bytes32 workKey, bytes32 evidenceHash)
        external
        onlyRole(VALIDATOR_ROLE)
        nonReentrant
    {
        Work storage work = _work[poolId][workKey];
        WorkHead storage head = _rejectedHead(poolId, workKey, work);
        Pool storage pool = _pools[poolId];
        {
            uint64 closedAt = uint64(head.statusSince) + pool.challengeWindow;
            if (block.timestamp >= closedAt) revert ComputePoolChallengeWindowClosed(poolId, workKey, closedAt);
        }
        address validator = _msgSender();
        address reporter = head.validator;
        if (validator == reporter) revert ComputePoolSelfVerdict(poolId, workKey, validator);
        _checkNotOwnWork(poolId, workKey, work.body.node, validator);
        _checkValidatorStake(validator);
        Rejection storage rejection = _rejections[poolId][workKey];
        address[] storage contesters = rejection.contesters;
        {
            uint256 count = contesters.length;
            for (uint256 i = 0; i < count; ++i) {
                if (contesters[i] == validator) revert ComputePoolAlreadyContested(poolId, workKey, validator);
            }
            contesters.push(validator);
            ++count;
            emit RejectionContested(poolId, workKey, validator, evidenceHash, count);
            if (count < pool.contestQuorum) return;
        }

        WorkStatus restored = rejection.previous.status;
        address[] memory paid = contesters;
        _copyHead(rejection.previous, head); // status, validator and times as before the rejection
        delete _rejections[poolId][workKey];
        emit RejectionOverturned(poolId, workKey, reporter, restored);
        _slashValidator(poolId, workKey, reporter, paid);
    }

    /// @inheritdoc IComputePool
    function executeRejection(uint256 poolId, bytes32 workKey) external nonReentrant {
        Work storage work = _work[poolId][workKey];
        WorkHead storage head = _rejectedHead(poolId, workKey, work);
        Pool storage pool = _pools[poolId];
        uint64 executableAt = uint64(head.statusSince) + pool.challengeWindow;
        if (block.timestamp < executableAt) revert ComputePoolChallengeWindowOpen(poolId, workKey, executableAt);
        Rejection storage rejection = _rejections[poolId][workKey];
        WorkHead storage previous = rejection.previous;
        WorkStatus status = previous.status;
        address attester = previous.validator;
        bytes32 reason = rejection.reason;
        delete _rejections[poolId][workKey];
        _invalidate(pool, poolId, workKey, status, attester, head.validator, reason);
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
            _setStatus(work.head, WorkStatus.Expired);
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
        Work storage work = _work[poolId][workKey];
        WorkHead storage head = work.head;
        WorkBody storage body = work.body;
        node = body.node;
        provider = _members[poolId][node].provider;
        status = head.status;
        workUnits = body.workUnits;
        modelVersion = body.modelVersion;
        submittedAt = head.submittedAt;
        statusSince = head.statusSince;
        validator = head.validator;
    }

    /// @inheritdoc IComputePool
    function workFiles(uint256 poolId, bytes32 workKey) external view returns (uint256) {
        return _work[poolId][workKey].head.files;
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
        WorkHead storage head = _work[poolId][workKey].head;
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

    /// @dev Accepts the Pending keys of an attestWork batch; returns their work units and files (each
    /// file reserves one validator fee).
    function _attestEach(uint256 poolId, bytes32[] calldata workKeys, address validator)
        private
        returns (uint256 units, uint256 accepted)
    {
        mapping(bytes32 => Work) storage works = _work[poolId];
        mapping(address => Member) storage members = _members[poolId];
        for (uint256 i = 0; i < workKeys.length; ++i) {
            bytes32 workKey = workKeys[i];
            Work storage work = works[workKey];
            WorkHead storage head = _checkAttestable(poolId, workKey, work, members, validator);
            WorkStatus status = head.status;
            if (status != WorkStatus.Pending) {
                emit WorkSkipped(poolId, workKey, status);
                continue;
            }
            _setHead(head, WorkStatus.Accepted, validator);
            units += work.body.workUnits;
            accepted += head.files;
            emit WorkAttested(poolId, workKey, validator);
        }
    }

    /// @dev The checks every submission passes: the caller is `node`, an active member of the Active
    /// pool, still active in the registry under the provider it joined with. Returns that provider.
    function _checkSubmitter(uint256 poolId, address node) private view returns (address provider) {
        if (_msgSender() != node) revert ComputePoolCallerNotNode(node, _msgSender());
        PoolStatus status = _pools[poolId].status;
        if (status != PoolStatus.Active) revert ComputePoolNotActive(poolId, status);
        Member memory member = _members[poolId][node];
        if (member.state != MemberState.Active) revert ComputePoolNotMember(poolId, node);
        provider = member.provider;
        if (_registry.activeNodeProvider(node) != provider) revert ComputePoolNodeInactive(node);
    }

    /// @dev Checks a bundle's shape (1 to MAX_BUNDLE_FILES files, one unit count per key, keys strictly
    /// ascending, no file of zero units) and returns its total units.
    function _bundleUnits(uint256 poolId, bytes32[] calldata fileKeys, uint64[] calldata fileUnits)
        private
        pure
        returns (uint64)
    {
        uint256 files = fileKeys.length;
        if (files == 0 || files > MAX_BUNDLE_FILES || fileUnits.length != files) {
            revert ComputePoolBadBundle(poolId, files, fileUnits.length);
        }
        uint256 units;
        bytes32 previous;
        for (uint256 i = 0; i < files; ++i) {
            bytes32 fileKey = fileKeys[i];
            if (i != 0 && fileKey <= previous) revert ComputePoolBadBundle(poolId, files, files);
            uint64 fileUnit = fileUnits[i];
            if (fileUnit == 0) revert ComputePoolZeroWorkUnits(poolId, fileKey);
            unchecked {
                // At most MAX_BUNDLE_FILES terms below 2^64 each.
                units += fileUnit;
            }
            previous = fileKey;
        }
        if (units > type(uint64).max) revert ComputePoolBundleUnitsOverflow(poolId, units);
        return uint64(units);
    }

    /// @dev Stores a new Pending submission of `files` files and holds its provider's stake for it.
    function _record(
        uint256 poolId,
        bytes32 workKey,
        address node,
        address provider,
        uint64 workUnits,
        uint32 modelVersion,
        uint8 files
    ) private {
        Work storage work = _work[poolId][workKey];
        if (work.head.status != WorkStatus.None) revert ComputePoolDuplicateWork(poolId, workKey);
        uint40 now_ = uint40(block.timestamp);
        work.head = WorkHead({
            status: WorkStatus.Pending,
            validator: address(0),
            statusSince: now_,
            submittedAt: now_,
            files: files
        });
        work.body = WorkBody({node: node, workUnits: workUnits, modelVersion: modelVersion});
        ++_openWorkPlusOne[provider];
    }

    /// @dev Sets a submission's status, the validator that set it and its statusSince (now) in one
    /// storage write; submittedAt and files stay. WorkHead is one slot: status in bits 0-7, validator
    /// 8-167, statusSince 168-207, submittedAt 208-247, files 248-255.
    function _setHead(WorkHead storage head, WorkStatus status, address validator) private {
        assembly ("memory-safe") {
            let kept := and(sload(head.slot), not(sub(shl(208, 1), 1)))
            sstore(head.slot, or(kept, or(or(status, shl(8, validator)), shl(168, and(timestamp(), 0xffffffffff)))))
        }
    }

    /// @dev Sets a submission's status and its statusSince (now) in one storage write; the rest stays.
    function _setStatus(WorkHead storage head, WorkStatus status) private {
        assembly ("memory-safe") {
            let mask := or(0xff, shl(168, 0xffffffffff))
            let kept := and(sload(head.slot), not(mask))
            sstore(head.slot, or(kept, or(status, shl(168, and(timestamp(), 0xffffffffff)))))
        }
    }

    /// @dev Copies a whole WorkHead (one slot) from `source` to `target`.
    function _copyHead(WorkHead storage source, WorkHead storage target) private {
        assembly ("memory-safe") {
            sstore(target.slot, sload(source.slot))
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
        returns (WorkHead storage head)
    {
        head = work.head;
        if (head.status != WorkStatus.Rejected) revert ComputePoolWorkNotRejected(poolId, workKey, head.status);
    }

    /// @dev Marks the work Invalid as `reporter`'s verdict, ejects and slashes the node's provider, and
    /// slashes `attester` when the status before the rejection, `previous`, was Accepted.
    function _invalidate(
        Pool storage pool,
        uint256 poolId,
        bytes32 workKey,
        WorkStatus previous,
        address attester,
        address reporter,
        bytes32 reason
    ) private {
        Work storage work = _work[poolId][workKey];
        _setHead(work.head, WorkStatus.Invalid, reporter);
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
        if (previous == WorkStatus.Accepted) {
            pool.reserved -= uint256(work.body.workUnits) * pool.rewardPerUnit + pool.validatorFee * work.head.files;
            address[] memory paid = new address[](1);
            paid[0] = reporter;
            _slashValidator(poolId, workKey, attester, paid);
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
        uint256 fee = settlement.validatorFee * head.files;
        if (member.state == MemberState.Slashed) {
            _setStatus(head, WorkStatus.Forfeited);
            settlement.reserved -= uint256(body.workUnits) * settlement.rewardPerUnit + fee;
            emit WorkForfeited(settlement.poolId, workKey, body.node);
            return;
        }
        _pay(settlement, workKey, body, fee, member.provider, head.validator);
        _setStatus(head, WorkStatus.Finalized);
    }

    /// @dev Takes reward + fee (the validator fee times the submission's files) of one submission from
    /// the batch budget and credits provider and validator.
    function _pay(
        Settlement memory settlement,
        bytes32 workKey,
        WorkBody memory body,
        uint256 fee,
        address provider,
        address validator
    ) private {
        uint256 reward = uint256(body.workUnits) * settlement.rewardPerUnit;
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

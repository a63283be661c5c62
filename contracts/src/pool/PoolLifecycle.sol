// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {SafeERC20} from "@openzeppelin/contracts/token/ERC20/utils/SafeERC20.sol";

import {IComputePool} from "../interfaces/IComputePool.sol";
import {PoolCore} from "./PoolCore.sol";

/// @title PoolLifecycle
/// @notice A pool's life: creation with its terms and challenge rules, funding, start, close, and after
/// the wind-up the refund of the budget no attested work needs; the budget reservation attestations make.
abstract contract PoolLifecycle is PoolCore {
    using SafeERC20 for IERC20;

    /// @dev Upper bound of a pool's contest quorum: contesting scans the contesters so far.
    uint16 internal constant _MAX_QUORUM = 32;

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
        pool.specSha256 = params.specSha256;
        emit PoolCreated(
            poolId,
            _msgSender(),
            params.manager,
            params.treasury,
            params.modelUri,
            params.specSha256,
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

    /// @inheritdoc IComputePool
    function getPool(uint256 poolId) external view returns (PoolInfo memory) {
        Pool storage pool = _pools[poolId];
        return PoolInfo({
            creator: pool.creator,
            manager: pool.manager,
            treasury: pool.treasury,
            status: pool.status,
            modelUri: pool.modelUri,
            specSha256: pool.specSha256,
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
    function challengeRules(uint256 poolId) external view returns (uint64 challengeWindow, uint16 contestQuorum) {
        Pool storage pool = _pools[poolId];
        return (pool.challengeWindow, pool.contestQuorum);
    }

    /// @inheritdoc IComputePool
    function budgetReserved(uint256 poolId) external view returns (uint256 reserved, uint64 windUpEndsAt) {
        Pool storage pool = _pools[poolId];
        uint64 closedAt = pool.closedAt;
        return (pool.reserved, closedAt == 0 ? 0 : closedAt + pool.disputeWindow);
    }

    /// @dev Challenge rules a pool may not be created with: a window that lets a verdict's stake be
    /// withdrawn before the verdict can be overturned, or a quorum outside 1.._MAX_QUORUM.
    function _checkChallengeRules(PoolParams calldata params, uint64 period) internal pure {
        uint64 window = params.challengeWindow;
        uint16 quorum = params.contestQuorum;
        bool badQuorum = window != 0 && (quorum == 0 || quorum > _MAX_QUORUM);
        // disputeWindow < period is checked first, so the subtraction cannot underflow.
        if (badQuorum || window >= period - params.disputeWindow) {
            revert ComputePoolInvalidChallengeRules(window, quorum, period);
        }
    }

    /// @dev Reserves the rewards and fees of `accepted` newly attested keys of `units` work units in
    /// total; reverts when the unreserved budget cannot cover them.
    function _reserve(uint256 poolId, uint256 units, uint256 accepted) internal {
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
    function _checkWindUpOver(Pool storage pool, uint256 poolId) internal view {
        PoolStatus status = pool.status;
        if (status != PoolStatus.Closed) revert ComputePoolNotClosed(poolId, status);
        uint64 endsAt = uint64(pool.closedAt) + pool.disputeWindow;
        if (block.timestamp < endsAt) revert ComputePoolWindUpNotOver(poolId, endsAt);
    }
}

// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {SafeERC20} from "@openzeppelin/contracts/token/ERC20/utils/SafeERC20.sol";

import {IComputePool} from "../interfaces/IComputePool.sol";
import {PoolLifecycle} from "./PoolLifecycle.sol";

/// @title PoolRewards
/// @notice Credited balances (rewards, validator fees, slash shares) and their withdrawal.
abstract contract PoolRewards is PoolLifecycle {
    using SafeERC20 for IERC20;

    mapping(address account => uint256) internal _rewards;

    /// @inheritdoc IComputePool
    function withdrawRewards() external nonReentrant returns (uint256 amount) {
        address account = _msgSender();
        amount = _rewards[account];
        if (amount == 0) revert ComputePoolNothingToWithdraw(account);
        _rewards[account] = 0;
        emit RewardsWithdrawn(account, amount);
        _token.safeTransfer(account, amount);
    }

    /// @inheritdoc IComputePool
    function rewardBalance(address account) external view returns (uint256) {
        return _rewards[account];
    }
}

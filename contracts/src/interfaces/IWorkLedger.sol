// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

/// @title IWorkLedger
/// @notice What the StakeManager asks before releasing stake: whether a provider still has work that a
/// verdict can slash.
interface IWorkLedger {
    /// @notice Submissions of `provider`'s nodes not yet settled: Pending, or Accepted and not yet
    /// finalized or forfeited. Stake backing them cannot be withdrawn.
    /// @param provider The provider.
    /// @return The number of open submissions.
    function openWork(address provider) external view returns (uint256);
}

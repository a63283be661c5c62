// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {EIP712} from "@openzeppelin/contracts/utils/cryptography/EIP712.sol";

import {PoolCore} from "./pool/PoolCore.sol";
import {PoolWorkLedger} from "./pool/PoolWorkLedger.sol";

/// @title ComputePool
/// @notice Compute pools, membership, submissions, verdicts and rewards. See {IComputePool}.
/// @dev Composed of one module per concern, each extending the one before: {PoolCore} (linked
/// contracts, roles, records, pool storage), {PoolLifecycle} (terms, funding, close, refund,
/// reservation), {PoolRewards}, {PoolCheckpoints}, {PoolMembership} (approvals, invites, joins,
/// ejection) and {PoolWorkLedger} (submissions, verdicts, challenges, settlement).
contract ComputePool is PoolWorkLedger {
    /// @param token_ The reward token (must be the StakeManager's token: slashed stake is paid out here).
    /// @param stakeManager_ The StakeManager; this contract needs its SLASHER_ROLE.
    /// @param registry_ The ComputeRegistry.
    /// @param admin Receives DEFAULT_ADMIN_ROLE (grants VALIDATOR_ROLE).
    constructor(address token_, address stakeManager_, address registry_, address admin)
        PoolCore(token_, stakeManager_, registry_, admin)
        EIP712("ProofpoolComputePool", "1")
    {}
}

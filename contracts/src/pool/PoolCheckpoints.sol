// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {IComputePool} from "../interfaces/IComputePool.sol";
import {PoolRewards} from "./PoolRewards.sol";

/// @title PoolCheckpoints
/// @notice The latest checkpoint of each pool, anchored by its manager.
abstract contract PoolCheckpoints is PoolRewards {
    mapping(uint256 poolId => Checkpoint) internal _checkpoints;

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

    /// @inheritdoc IComputePool
    function latestCheckpoint(uint256 poolId)
        external
        view
        returns (uint32 version, bytes32 manifestSha256, string memory uri, uint64 publishedAt)
    {
        Checkpoint storage checkpoint = _checkpoints[poolId];
        return (checkpoint.version, checkpoint.manifestSha256, checkpoint.uri, checkpoint.publishedAt);
    }
}

// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {AccessControl} from "@openzeppelin/contracts/access/AccessControl.sol";
import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {ReentrancyGuard} from "@openzeppelin/contracts/utils/ReentrancyGuard.sol";

import {IComputePool} from "../interfaces/IComputePool.sol";
import {IComputeRegistry} from "../interfaces/IComputeRegistry.sol";
import {IStakeManager} from "../interfaces/IStakeManager.sol";

/// @title PoolCore
/// @notice What every ComputePool module shares: the linked contracts, the roles, the record types
/// and the pools' storage with the checks that find a pool and its creator or manager.
/// @dev Gas layout: a submission (one file or a bundle) is two storage slots. `WorkHead` (status,
/// validator, statusSince, submittedAt, files) is the only slot attestWork and finalizeWork write;
/// `WorkBody` (node, units, version) is written once. attestWork, invalidateWork and finalizeWork read
/// the provider from the membership record bound at join; only submitWork and submitWorkBundle ask the
/// registry (once) whether the node is still active under it.
abstract contract PoolCore is IComputePool, AccessControl, ReentrancyGuard {
    /// @notice Role allowed to attest and invalidate work.
    bytes32 public constant VALIDATOR_ROLE = keccak256("VALIDATOR_ROLE");

    uint256 internal constant _BPS = 10_000;

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
        bytes32 specSha256;
        string modelUri;
    }

    struct Member {
        address provider;
        MemberState state;
        bool blacklisted;
        uint40 since;
    }

    /// @dev `files` is 1 for a submitWork, the file count of a bundle (<= MAX_BUNDLE_FILES <= 255):
    /// the one spare byte of the slot, so fees per file cost no extra storage. Every rewrite keeps it.
    struct WorkHead {
        WorkStatus status;
        address validator;
        uint40 statusSince;
        uint40 submittedAt;
        uint8 files;
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

    IERC20 internal immutable _token;
    IStakeManager internal immutable _stakeManager;
    IComputeRegistry internal immutable _registry;

    uint256 internal _poolCount;
    mapping(uint256 poolId => Pool) internal _pools;

    /// @param token_ The reward token (must be the StakeManager's token: slashed stake is paid out here).
    /// @param stakeManager_ The StakeManager; this contract needs its SLASHER_ROLE.
    /// @param registry_ The ComputeRegistry.
    /// @param admin Receives DEFAULT_ADMIN_ROLE (grants VALIDATOR_ROLE).
    constructor(address token_, address stakeManager_, address registry_, address admin) {
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

    function _existingPool(uint256 poolId) internal view returns (Pool storage pool) {
        pool = _pools[poolId];
        if (pool.status == PoolStatus.None) revert ComputePoolUnknownPool(poolId);
    }

    function _creatorOrManagerPool(uint256 poolId) internal view returns (Pool storage pool) {
        pool = _existingPool(poolId);
        if (_msgSender() != pool.creator && _msgSender() != pool.manager) {
            revert ComputePoolNotCreatorOrManager(poolId, _msgSender());
        }
    }

    function _onlyManager(uint256 poolId) internal view {
        if (_msgSender() != _pools[poolId].manager) revert ComputePoolNotManager(poolId, _msgSender());
    }
}

// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {ECDSA} from "@openzeppelin/contracts/utils/cryptography/ECDSA.sol";
import {EIP712} from "@openzeppelin/contracts/utils/cryptography/EIP712.sol";
import {SafeCast} from "@openzeppelin/contracts/utils/math/SafeCast.sol";

import {IComputePool} from "../interfaces/IComputePool.sol";
import {PoolCheckpoints} from "./PoolCheckpoints.sol";

/// @title PoolMembership
/// @notice Providers' approvals of pools, invite-only joins signed by the manager (EIP-712), leaving,
/// ejection and blacklisting.
abstract contract PoolMembership is PoolCheckpoints, EIP712 {
    /// @notice EIP-712 type hash of Invite(uint256 poolId,address node,uint256 nonce,uint256 expiry).
    bytes32 public constant INVITE_TYPEHASH = keccak256("Invite(uint256 poolId,address node,uint256 nonce,uint256 expiry)");

    mapping(uint256 poolId => mapping(address node => Member)) internal _members;
    mapping(bytes32 digest => bool) internal _usedInvites;
    mapping(uint256 poolId => mapping(address provider => Approval)) internal _approvals;
    /// @dev Open submissions per provider, stored plus one (see approvePool).
    mapping(address provider => uint256) internal _openWorkPlusOne;

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
    function poolApproval(uint256 poolId, address provider)
        external
        view
        returns (uint256 maxSlash, uint256 slashed, bool approved)
    {
        Approval memory approval = _approvals[poolId][provider];
        return (approval.maxSlash, approval.slashed, approval.approved);
    }

    /// @inheritdoc IComputePool
    function isBlacklisted(uint256 poolId, address node) external view returns (bool) {
        return _members[poolId][node].blacklisted;
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

    function _activeMember(uint256 poolId, address node) internal view returns (Member storage member) {
        member = _members[poolId][node];
        if (member.state != MemberState.Active) revert ComputePoolNotMember(poolId, node);
    }

    function _eject(uint256 poolId, address node, Member storage member) internal {
        member.state = MemberState.Ejected;
        member.since = uint40(block.timestamp);
        emit NodeEjected(poolId, node, member.provider, false);
    }

    function _inviteDigest(uint256 poolId, address node, uint256 nonce, uint256 expiry)
        internal
        view
        returns (bytes32)
    {
        return _hashTypedDataV4(keccak256(abi.encode(INVITE_TYPEHASH, poolId, node, nonce, expiry)));
    }

    /// @dev Expiry first, then single use, then the signer; returns the invite digest.
    function _checkInvite(uint256 poolId, address node, uint256 nonce, uint256 expiry, bytes calldata signature)
        internal
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
    function _checkJoin(uint256 poolId, address node, Member storage member) internal view returns (address provider) {
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
}

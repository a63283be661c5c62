// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {AccessControl} from "@openzeppelin/contracts/access/AccessControl.sol";
import {ECDSA} from "@openzeppelin/contracts/utils/cryptography/ECDSA.sol";
import {EIP712} from "@openzeppelin/contracts/utils/cryptography/EIP712.sol";

import {IComputeRegistry} from "./interfaces/IComputeRegistry.sol";
import {IStakeManager} from "./interfaces/IStakeManager.sol";

/// @title ComputeRegistry
/// @notice Providers and their nodes. See {IComputeRegistry}.
contract ComputeRegistry is IComputeRegistry, AccessControl, EIP712 {
    /// @notice Role allowed to attest node hardware.
    bytes32 public constant ATTESTER_ROLE = keccak256("ATTESTER_ROLE");

    /// @notice EIP-712 type hash of NodeOwnership(address provider,address node,uint256 nonce,uint256 deadline).
    bytes32 public constant NODE_OWNERSHIP_TYPEHASH =
        keccak256("NodeOwnership(address provider,address node,uint256 nonce,uint256 deadline)");

    struct Node {
        address provider;
        uint32 computeUnits;
        bool attested;
        bool active;
        bytes32 specsHash;
    }

    IStakeManager private immutable _stakeManager;
    mapping(address account => bool) private _providers;
    mapping(address provider => uint256) private _computeUnits;
    mapping(address node => Node) private _nodes;
    mapping(address node => uint256) private _nodeNonces;

    /// @param stakeManager_ The StakeManager consulted for stake.
    /// @param admin Receives DEFAULT_ADMIN_ROLE (grants ATTESTER_ROLE).
    constructor(address stakeManager_, address admin) EIP712("ProofpoolComputeRegistry", "1") {
        if (stakeManager_ == address(0) || admin == address(0)) revert ComputeRegistryZeroAddress();
        _stakeManager = IStakeManager(stakeManager_);
        _grantRole(DEFAULT_ADMIN_ROLE, admin);
    }

    /// @inheritdoc IComputeRegistry
    function registerProvider() external {
        address provider = _msgSender();
        if (_providers[provider]) revert ComputeRegistryProviderAlreadyRegistered(provider);
        _providers[provider] = true;
        emit ProviderRegistered(provider);
    }

    /// @inheritdoc IComputeRegistry
    function addNode(
        address node,
        uint32 computeUnits,
        bytes32 specsHash,
        uint256 deadline,
        bytes calldata signature
    ) external {
        address provider = _msgSender();
        if (!_providers[provider]) revert ComputeRegistryProviderNotRegistered(provider);
        if (node == address(0)) revert ComputeRegistryZeroAddress();
        if (computeUnits == 0) revert ComputeRegistryZeroComputeUnits(node);
        Node storage record = _nodes[node];
        if (record.active) revert ComputeRegistryNodeAlreadyRegistered(node, record.provider);
        if (block.timestamp > deadline) revert ComputeRegistryNodeSignatureExpired(node, deadline);
        _checkOwnership(provider, node, deadline, signature);
        uint256 units = _computeUnits[provider] + computeUnits;
        uint256 required = _stakeManager.requiredStakeFor(units);
        uint256 active = _stakeManager.activeStake(provider);
        if (active < required) revert ComputeRegistryInsufficientStake(provider, active, required);

        _computeUnits[provider] = units;
        _nodes[node] = Node({
            provider: provider,
            computeUnits: computeUnits,
            attested: false,
            active: true,
            specsHash: specsHash
        });
        emit NodeAdded(provider, node, computeUnits, specsHash, units);
    }

    /// @inheritdoc IComputeRegistry
    function removeNode(address node) external {
        Node storage record = _nodes[node];
        if (!record.active) revert ComputeRegistryUnknownNode(node);
        address provider = record.provider;
        if (provider != _msgSender()) revert ComputeRegistryNotNodeProvider(node, _msgSender());
        uint32 computeUnits = record.computeUnits;
        uint256 units = _computeUnits[provider] - computeUnits;
        _computeUnits[provider] = units;
        record.active = false;
        emit NodeRemoved(provider, node, computeUnits, units);
    }

    /// @inheritdoc IComputeRegistry
    function attestNode(address node) external onlyRole(ATTESTER_ROLE) {
        Node storage record = _nodes[node];
        if (!record.active) revert ComputeRegistryUnknownNode(node);
        if (record.attested) revert ComputeRegistryNodeAlreadyAttested(node);
        record.attested = true;
        emit NodeAttested(record.provider, node, _msgSender());
    }

    /// @inheritdoc IComputeRegistry
    function getNode(address node)
        external
        view
        returns (address provider, uint32 computeUnits, bytes32 specsHash, bool attested, bool active)
    {
        Node storage record = _nodes[node];
        return (record.provider, record.computeUnits, record.specsHash, record.attested, record.active);
    }

    /// @inheritdoc IComputeRegistry
    function activeNodeProvider(address node) external view returns (address) {
        Node storage record = _nodes[node];
        return record.active ? record.provider : address(0);
    }

    /// @inheritdoc IComputeRegistry
    function providerComputeUnits(address provider) external view returns (uint256) {
        return _computeUnits[provider];
    }

    /// @inheritdoc IComputeRegistry
    function isProvider(address account) external view returns (bool) {
        return _providers[account];
    }

    /// @inheritdoc IComputeRegistry
    function nodeOwnershipDigest(address provider, address node, uint256 nonce, uint256 deadline)
        external
        view
        returns (bytes32)
    {
        return _nodeOwnershipDigest(provider, node, nonce, deadline);
    }

    /// @inheritdoc IComputeRegistry
    function stakeManager() external view returns (address) {
        return address(_stakeManager);
    }

    /// @inheritdoc IComputeRegistry
    function nodeNonce(address node) external view returns (uint256) {
        return _nodeNonces[node];
    }

    /// @dev The node key signed NodeOwnership(provider, node, its current nonce, deadline); uses the nonce up.
    function _checkOwnership(address provider, address node, uint256 deadline, bytes calldata signature) private {
        uint256 nonce = _nodeNonces[node];
        (address recovered, ECDSA.RecoverError err, ) = ECDSA.tryRecoverCalldata(
            _nodeOwnershipDigest(provider, node, nonce, deadline),
            signature
        );
        if (err != ECDSA.RecoverError.NoError || recovered != node) {
            revert ComputeRegistryInvalidNodeSignature(node, recovered);
        }
        _nodeNonces[node] = nonce + 1;
    }

    function _nodeOwnershipDigest(address provider, address node, uint256 nonce, uint256 deadline)
        private
        view
        returns (bytes32)
    {
        return _hashTypedDataV4(keccak256(abi.encode(NODE_OWNERSHIP_TYPEHASH, provider, node, nonce, deadline)));
    }
}

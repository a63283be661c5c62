// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

/// @title IComputeRegistry
/// @notice Providers and their nodes. A node joins a provider only with the node key's EIP-712
/// signature over NodeOwnership(provider, node), bound to this chain and this registry.
interface IComputeRegistry {
    /// @notice `provider` registered.
    /// @param provider The new provider.
    event ProviderRegistered(address indexed provider);

    /// @notice `provider` added `node` with `computeUnits` units described by `specsHash`.
    /// @param provider The node's provider.
    /// @param node The node's address (its signing key).
    /// @param computeUnits Compute units the node brings.
    /// @param specsHash Hash of the node's hardware description (off-chain document).
    /// @param providerComputeUnits The provider's total compute units after the call.
    event NodeAdded(
        address indexed provider,
        address indexed node,
        uint32 computeUnits,
        bytes32 specsHash,
        uint256 providerComputeUnits
    );

    /// @notice `provider` removed `node`.
    /// @param provider The node's provider.
    /// @param node The removed node.
    /// @param computeUnits Compute units released.
    /// @param providerComputeUnits The provider's total compute units after the call.
    event NodeRemoved(
        address indexed provider,
        address indexed node,
        uint32 computeUnits,
        uint256 providerComputeUnits
    );

    /// @notice `attester` attested the hardware of `node`.
    /// @param provider The node's provider.
    /// @param node The attested node.
    /// @param attester The ATTESTER_ROLE holder.
    event NodeAttested(address indexed provider, address indexed node, address indexed attester);

    /// @notice A zero address was given where a contract or account is needed.
    error ComputeRegistryZeroAddress();

    /// @notice `provider` is registered already.
    /// @param provider The caller.
    error ComputeRegistryProviderAlreadyRegistered(address provider);

    /// @notice `provider` is not registered.
    /// @param provider The caller.
    error ComputeRegistryProviderNotRegistered(address provider);

    /// @notice A node must bring at least one compute unit.
    /// @param node The node.
    error ComputeRegistryZeroComputeUnits(address node);

    /// @notice `node` is active under `provider` already.
    /// @param node The node.
    /// @param provider Its current provider.
    error ComputeRegistryNodeAlreadyRegistered(address node, address provider);

    /// @notice The ownership signature recovers to `recovered`, not to `node`.
    /// @param node The node that should have signed.
    /// @param recovered The recovered signer (zero for a malformed signature).
    error ComputeRegistryInvalidNodeSignature(address node, address recovered);

    /// @notice The ownership signature was valid only until `deadline`.
    /// @param node The node.
    /// @param deadline The signed deadline (unix time).
    error ComputeRegistryNodeSignatureExpired(address node, uint256 deadline);

    /// @notice `provider` has `activeStake` but needs `required` for its compute units plus the new ones.
    /// @param provider The caller.
    /// @param activeStake Its active stake.
    /// @param required Stake required after adding the node.
    error ComputeRegistryInsufficientStake(address provider, uint256 activeStake, uint256 required);

    /// @notice `node` is not an active node of the registry.
    /// @param node The node.
    error ComputeRegistryUnknownNode(address node);

    /// @notice `caller` is not the provider of `node`.
    /// @param node The node.
    /// @param caller The caller.
    error ComputeRegistryNotNodeProvider(address node, address caller);

    /// @notice `node` is attested already.
    /// @param node The node.
    error ComputeRegistryNodeAlreadyAttested(address node);

    /// @notice Registers the caller as a provider. Emits {ProviderRegistered}.
    function registerProvider() external;

    /// @notice Adds `node` to the caller (a registered provider). `signature` is the node key's EIP-712
    /// signature over NodeOwnership(address provider,address node,uint256 nonce,uint256 deadline) with
    /// domain ("ProofpoolComputeRegistry", "1", chainId, this), `nonce` the node's {nodeNonce}; it is
    /// refused after `deadline` and used up by this call, so it cannot be replayed (for instance to
    /// add the node back after its provider removed it). The caller's active stake must cover
    /// requiredStakeFor(providerComputeUnits + computeUnits). A removed node may be added again with
    /// a fresh signature. Emits {NodeAdded}.
    /// @param node The node address.
    /// @param computeUnits Compute units the node brings (> 0).
    /// @param specsHash Hash of the node's hardware description.
    /// @param deadline Last unix time the signature is valid.
    /// @param signature 65-byte (or 64-byte EIP-2098) signature by the node key over
    /// NodeOwnership(provider, node, nonce, deadline), with the node's current {nodeNonce}.
    function addNode(
        address node,
        uint32 computeUnits,
        bytes32 specsHash,
        uint256 deadline,
        bytes calldata signature
    ) external;

    /// @notice Removes `node`; only its provider may. Releases its compute units. Emits {NodeRemoved}.
    /// @param node The node.
    function removeNode(address node) external;

    /// @notice Marks `node` as hardware-attested. Needs ATTESTER_ROLE. Emits {NodeAttested}.
    /// @param node An active node.
    function attestNode(address node) external;

    /// @notice The node record (kept after removal with `active` false).
    /// @param node The node.
    /// @return provider Its provider (zero if never added).
    /// @return computeUnits Its compute units.
    /// @return specsHash Its hardware description hash.
    /// @return attested Whether an attester vouched for it.
    /// @return active Whether it is currently registered.
    function getNode(address node)
        external
        view
        returns (address provider, uint32 computeUnits, bytes32 specsHash, bool attested, bool active);

    /// @notice Provider of `node` if the node is active, else zero. One storage read; used by ComputePool.
    /// @param node The node.
    /// @return The provider or address(0).
    function activeNodeProvider(address node) external view returns (address);

    /// @notice Sum of the compute units of the provider's active nodes.
    /// @param provider The provider.
    /// @return The compute units.
    function providerComputeUnits(address provider) external view returns (uint256);

    /// @notice Whether `account` registered as a provider.
    /// @param account The account.
    /// @return True if registered.
    function isProvider(address account) external view returns (bool);

    /// @notice The EIP-712 digest the node key signs to be added by `provider`.
    /// @param provider The provider.
    /// @param node The node.
    /// @param nonce The node's nonce ({nodeNonce}) the signature is for.
    /// @param deadline Last unix time the signature is valid.
    /// @return The typed-data digest for this chain and this registry.
    function nodeOwnershipDigest(address provider, address node, uint256 nonce, uint256 deadline)
        external
        view
        returns (bytes32);

    /// @notice The nonce the next ownership signature of `node` must carry; each {addNode} of the
    /// node uses it up, so a signature adds the node once (not again after a removal).
    /// @param node The node.
    /// @return The current nonce.
    function nodeNonce(address node) external view returns (uint256);

    /// @notice The StakeManager consulted for stake.
    /// @return The stake manager address.
    function stakeManager() external view returns (address);
}

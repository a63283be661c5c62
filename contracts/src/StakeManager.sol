// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {AccessControl} from "@openzeppelin/contracts/access/AccessControl.sol";
import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {SafeERC20} from "@openzeppelin/contracts/token/ERC20/utils/SafeERC20.sol";
import {ReentrancyGuard} from "@openzeppelin/contracts/utils/ReentrancyGuard.sol";

import {IComputeRegistry} from "./interfaces/IComputeRegistry.sol";
import {IStakeManager} from "./interfaces/IStakeManager.sol";
import {IWorkLedger} from "./interfaces/IWorkLedger.sol";

/// @title StakeManager
/// @notice Provider collateral. See {IStakeManager}.
contract StakeManager is IStakeManager, AccessControl, ReentrancyGuard {
    using SafeERC20 for IERC20;

    /// @notice Role allowed to slash (the ComputePool).
    bytes32 public constant SLASHER_ROLE = keccak256("SLASHER_ROLE");

    struct Unbonding {
        uint256 amount;
        uint64 maturesAt;
    }

    IERC20 private immutable _token;
    IComputeRegistry private _registry;
    IWorkLedger private _workLedger;
    uint64 private _unbondingPeriod;
    uint256 private _minStake;
    uint256 private _stakePerComputeUnit;
    mapping(address provider => uint256) private _active;
    mapping(address provider => Unbonding) private _unbonding;

    /// @param token_ The staked token.
    /// @param admin Receives DEFAULT_ADMIN_ROLE.
    /// @param unbondingPeriod_ Seconds between unbond and withdrawal.
    /// @param minStake_ Base stake of a provider with compute units.
    /// @param stakePerComputeUnit_ Stake per registered compute unit.
    constructor(
        address token_,
        address admin,
        uint64 unbondingPeriod_,
        uint256 minStake_,
        uint256 stakePerComputeUnit_
    ) {
        if (token_ == address(0) || admin == address(0)) revert StakeManagerZeroAddress();
        _token = IERC20(token_);
        _grantRole(DEFAULT_ADMIN_ROLE, admin);
        _setUnbondingPeriod(unbondingPeriod_);
        _setStakeParams(minStake_, stakePerComputeUnit_);
    }

    /// @inheritdoc IStakeManager
    function stake(uint256 amount) external nonReentrant {
        _stake(_msgSender(), amount);
    }

    /// @inheritdoc IStakeManager
    function stakeFor(address account, uint256 amount) external nonReentrant {
        if (account == address(0)) revert StakeManagerZeroAddress();
        _stake(account, amount);
    }

    /// @inheritdoc IStakeManager
    function unbond(uint256 amount) external {
        if (amount == 0) revert StakeManagerZeroAmount();
        address provider = _msgSender();
        uint256 active = _active[provider];
        if (amount > active) revert StakeManagerInsufficientStake(provider, active, amount);
        uint256 remaining;
        unchecked {
            // amount <= active, checked above.
            remaining = active - amount;
        }
        uint256 units = _providerComputeUnits(provider);
        if (units > 0) {
            uint256 required = _requiredStakeFor(units);
            if (remaining < required) revert StakeManagerBelowRequiredStake(provider, remaining, required);
        }
        _active[provider] = remaining;
        Unbonding storage bucket = _unbonding[provider];
        uint256 unbondingAmount = bucket.amount + amount;
        uint64 maturesAt = uint64(block.timestamp) + _unbondingPeriod;
        bucket.amount = unbondingAmount;
        bucket.maturesAt = maturesAt;
        emit UnbondStarted(provider, amount, unbondingAmount, maturesAt);
    }

    /// @inheritdoc IStakeManager
    function withdraw() external nonReentrant returns (uint256 amount) {
        address provider = _msgSender();
        Unbonding memory bucket = _unbonding[provider];
        if (bucket.amount == 0) revert StakeManagerNothingToWithdraw(provider);
        if (block.timestamp < bucket.maturesAt) revert StakeManagerUnbondingNotMatured(provider, bucket.maturesAt);
        IWorkLedger ledger = _workLedger;
        if (address(ledger) != address(0)) {
            uint256 open = ledger.openWork(provider);
            if (open > 0) revert StakeManagerOpenWork(provider, open);
        }
        amount = bucket.amount;
        delete _unbonding[provider];
        emit Withdrawn(provider, amount);
        _token.safeTransfer(provider, amount);
    }

    /// @inheritdoc IStakeManager
    function slash(address provider, uint256 amount)
        external
        onlyRole(SLASHER_ROLE)
        nonReentrant
        returns (uint256 slashed)
    {
        Unbonding storage bucket = _unbonding[provider];
        uint256 inBucket = bucket.amount;
        uint256 fromUnbonding = amount < inBucket ? amount : inBucket;
        uint256 fromActive;
        unchecked {
            // fromUnbonding <= amount and <= inBucket by construction.
            uint256 rest = amount - fromUnbonding;
            uint256 active = _active[provider];
            fromActive = rest < active ? rest : active;
            bucket.amount = inBucket - fromUnbonding;
            _active[provider] = active - fromActive;
            slashed = fromUnbonding + fromActive;
        }
        address slasher = _msgSender();
        emit Slashed(provider, slasher, amount, fromUnbonding, fromActive);
        if (slashed > 0) _token.safeTransfer(slasher, slashed);
    }

    /// @inheritdoc IStakeManager
    function setComputeRegistry(address registry) external onlyRole(DEFAULT_ADMIN_ROLE) {
        if (registry == address(0)) revert StakeManagerZeroAddress();
        address old = address(_registry);
        _registry = IComputeRegistry(registry);
        emit ComputeRegistryUpdated(old, registry);
    }

    /// @inheritdoc IStakeManager
    function setWorkLedger(address ledger) external onlyRole(DEFAULT_ADMIN_ROLE) {
        if (ledger == address(0)) revert StakeManagerZeroAddress();
        address old = address(_workLedger);
        _workLedger = IWorkLedger(ledger);
        emit WorkLedgerUpdated(old, ledger);
    }

    /// @inheritdoc IStakeManager
    function setUnbondingPeriod(uint64 newPeriod) external onlyRole(DEFAULT_ADMIN_ROLE) {
        if (newPeriod <= _unbondingPeriod) revert StakeManagerUnbondingPeriodNotIncreased(_unbondingPeriod, newPeriod);
        _setUnbondingPeriod(newPeriod);
    }

    /// @inheritdoc IStakeManager
    function setStakeParams(uint256 newMinStake, uint256 newStakePerComputeUnit)
        external
        onlyRole(DEFAULT_ADMIN_ROLE)
    {
        _setStakeParams(newMinStake, newStakePerComputeUnit);
    }

    /// @inheritdoc IStakeManager
    function token() external view returns (address) {
        return address(_token);
    }

    /// @inheritdoc IStakeManager
    function workLedger() external view returns (address) {
        return address(_workLedger);
    }

    /// @inheritdoc IStakeManager
    function computeRegistry() external view returns (address) {
        return address(_registry);
    }

    /// @inheritdoc IStakeManager
    function activeStake(address provider) external view returns (uint256) {
        return _active[provider];
    }

    /// @inheritdoc IStakeManager
    function unbonding(address provider) external view returns (uint256 amount, uint64 maturesAt) {
        Unbonding memory bucket = _unbonding[provider];
        return (bucket.amount, bucket.maturesAt);
    }

    /// @inheritdoc IStakeManager
    function requiredStake(address provider) external view returns (uint256) {
        return _requiredStakeFor(_providerComputeUnits(provider));
    }

    /// @inheritdoc IStakeManager
    function requiredStakeFor(uint256 computeUnits) external view returns (uint256) {
        return _requiredStakeFor(computeUnits);
    }

    /// @inheritdoc IStakeManager
    function unbondingPeriod() external view returns (uint64) {
        return _unbondingPeriod;
    }

    /// @inheritdoc IStakeManager
    function minStake() external view returns (uint256) {
        return _minStake;
    }

    /// @inheritdoc IStakeManager
    function stakePerComputeUnit() external view returns (uint256) {
        return _stakePerComputeUnit;
    }

    /// @dev Credits `amount` to `account` and pulls it from the caller.
    function _stake(address account, uint256 amount) private {
        if (amount == 0) revert StakeManagerZeroAmount();
        uint256 active = _active[account] + amount;
        _active[account] = active;
        emit Staked(account, amount, active);
        _token.safeTransferFrom(_msgSender(), address(this), amount);
    }

    function _setUnbondingPeriod(uint64 newPeriod) private {
        uint64 old = _unbondingPeriod;
        _unbondingPeriod = newPeriod;
        emit UnbondingPeriodUpdated(old, newPeriod);
    }

    function _setStakeParams(uint256 newMinStake, uint256 newStakePerComputeUnit) private {
        uint256 oldMin = _minStake;
        uint256 oldPerUnit = _stakePerComputeUnit;
        _minStake = newMinStake;
        _stakePerComputeUnit = newStakePerComputeUnit;
        emit MinStakeUpdated(oldMin, newMinStake);
        emit StakePerComputeUnitUpdated(oldPerUnit, newStakePerComputeUnit);
    }

    function _providerComputeUnits(address provider) private view returns (uint256) {
        IComputeRegistry registry = _registry;
        return address(registry) == address(0) ? 0 : registry.providerComputeUnits(provider);
    }

    function _requiredStakeFor(uint256 computeUnits) private view returns (uint256) {
        return _minStake + _stakePerComputeUnit * computeUnits;
    }
}

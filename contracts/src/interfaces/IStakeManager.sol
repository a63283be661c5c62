// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

/// @title IStakeManager
/// @notice Provider collateral: stake, a single unbonding bucket per provider, withdrawal after the
/// unbonding period, and slashing by SLASHER_ROLE (the ComputePool). Required stake grows with the
/// compute units the provider has registered in the ComputeRegistry.
interface IStakeManager {
    /// @notice `provider` added `amount` to its active stake, which is now `activeStake`.
    /// @param provider The staking provider.
    /// @param amount Tokens pulled from the provider.
    /// @param activeStake The provider's active stake after the call.
    event Staked(address indexed provider, uint256 amount, uint256 activeStake);

    /// @notice `provider` moved `amount` from active stake into its unbonding bucket.
    /// @param provider The unbonding provider.
    /// @param amount Tokens moved by this call.
    /// @param unbondingAmount Total in the bucket after the call.
    /// @param maturesAt Unix time from which the whole bucket can be withdrawn.
    event UnbondStarted(address indexed provider, uint256 amount, uint256 unbondingAmount, uint64 maturesAt);

    /// @notice `provider` withdrew its matured unbonding bucket.
    /// @param provider The withdrawing provider.
    /// @param amount Tokens transferred to the provider.
    event Withdrawn(address indexed provider, uint256 amount);

    /// @notice `slasher` took `fromUnbonding + fromActive` tokens of `provider` (asked for `requested`).
    /// @param provider The slashed provider.
    /// @param slasher The SLASHER_ROLE holder that received the tokens.
    /// @param requested Amount the slasher asked for.
    /// @param fromUnbonding Part taken from the unbonding bucket.
    /// @param fromActive Part taken from active stake.
    event Slashed(
        address indexed provider,
        address indexed slasher,
        uint256 requested,
        uint256 fromUnbonding,
        uint256 fromActive
    );

    /// @notice The ComputeRegistry consulted for compute units changed.
    /// @param oldRegistry Previous registry (zero at first set).
    /// @param newRegistry New registry.
    event ComputeRegistryUpdated(address oldRegistry, address newRegistry);

    /// @notice The work ledger consulted before a withdrawal changed.
    /// @param oldLedger Previous ledger (zero at first set).
    /// @param newLedger New ledger.
    event WorkLedgerUpdated(address oldLedger, address newLedger);

    /// @notice The unbonding period changed.
    /// @param oldPeriod Previous period in seconds.
    /// @param newPeriod New period in seconds.
    event UnbondingPeriodUpdated(uint64 oldPeriod, uint64 newPeriod);

    /// @notice The base stake a provider with compute units must keep changed.
    /// @param oldMinStake Previous value.
    /// @param newMinStake New value.
    event MinStakeUpdated(uint256 oldMinStake, uint256 newMinStake);

    /// @notice The stake required per registered compute unit changed.
    /// @param oldStakePerComputeUnit Previous value.
    /// @param newStakePerComputeUnit New value.
    event StakePerComputeUnitUpdated(uint256 oldStakePerComputeUnit, uint256 newStakePerComputeUnit);

    /// @notice A zero address was given where a contract or account is needed.
    error StakeManagerZeroAddress();

    /// @notice A zero amount was given to stake or unbond.
    error StakeManagerZeroAmount();

    /// @notice `provider` tried to unbond `requested` but has only `available` active stake.
    /// @param provider The caller.
    /// @param available Its active stake.
    /// @param requested The amount asked for.
    error StakeManagerInsufficientStake(address provider, uint256 available, uint256 requested);

    /// @notice Unbonding would leave `remaining` active stake, below the `required` stake of the
    /// provider's registered compute units.
    /// @param provider The caller.
    /// @param remaining Active stake that would remain.
    /// @param required Stake required for its compute units.
    error StakeManagerBelowRequiredStake(address provider, uint256 remaining, uint256 required);

    /// @notice `provider` has nothing unbonding.
    /// @param provider The caller.
    error StakeManagerNothingToWithdraw(address provider);

    /// @notice The unbonding bucket of `provider` matures only at `maturesAt`.
    /// @param provider The caller.
    /// @param maturesAt Unix time from which withdrawal is allowed.
    error StakeManagerUnbondingNotMatured(address provider, uint64 maturesAt);

    /// @notice `provider` still has `openWork` submissions a verdict can slash: its stake stays bonded.
    /// @param provider The caller.
    /// @param openWork Its open submissions (see {IWorkLedger-openWork}).
    error StakeManagerOpenWork(address provider, uint256 openWork);

    /// @notice The unbonding period can only grow (it must stay above every pool's dispute window).
    /// @param currentPeriod The period in force.
    /// @param proposedPeriod The refused value.
    error StakeManagerUnbondingPeriodNotIncreased(uint64 currentPeriod, uint64 proposedPeriod);

    /// @notice Adds `amount` to the caller's active stake, pulling tokens (approve first).
    /// Emits {Staked}.
    /// @param amount Tokens to stake; must be > 0.
    function stake(uint256 amount) external;

    /// @notice Adds `amount` to `account`'s active stake, pulling the tokens from the caller (approve
    /// first). Only `account` can unbond and withdraw it; used to fund a validator's stake from a
    /// treasury or the devnet faucet. Emits {Staked}.
    /// @param account The account whose stake grows.
    /// @param amount Tokens to stake; must be > 0.
    function stakeFor(address account, uint256 amount) external;

    /// @notice Moves `amount` of the caller's active stake into its unbonding bucket and restarts the
    /// bucket's maturity at now + unbondingPeriod. While the caller has registered compute units, the
    /// remaining active stake must stay >= requiredStake(caller). Emits {UnbondStarted}.
    /// @param amount Tokens to unbond; must be > 0 and <= active stake.
    function unbond(uint256 amount) external;

    /// @notice Transfers the caller's whole matured unbonding bucket to the caller, once the work ledger
    /// reports no open work of the caller (stake backing Pending or undisputed work stays slashable).
    /// Emits {Withdrawn}.
    /// @return amount Tokens transferred.
    function withdraw() external returns (uint256 amount);

    /// @notice Takes up to `amount` from `provider` (unbonding bucket first, then active stake) and
    /// transfers it to the caller. Needs SLASHER_ROLE. Emits {Slashed}.
    /// @param provider The provider to slash.
    /// @param amount The amount asked for.
    /// @return slashed The amount actually taken (less than `amount` if the provider has less).
    function slash(address provider, uint256 amount) external returns (uint256 slashed);

    /// @notice Sets the ComputeRegistry whose compute units drive the required stake. Needs
    /// DEFAULT_ADMIN_ROLE. Emits {ComputeRegistryUpdated}.
    /// @param registry The registry contract.
    function setComputeRegistry(address registry) external;

    /// @notice Sets the work ledger (the ComputePool) asked for a provider's open work before a
    /// withdrawal. Needs DEFAULT_ADMIN_ROLE. Emits {WorkLedgerUpdated}.
    /// @param ledger The ledger contract.
    function setWorkLedger(address ledger) external;

    /// @notice Raises the unbonding period. Needs DEFAULT_ADMIN_ROLE. Emits {UnbondingPeriodUpdated}.
    /// @param newPeriod New period in seconds; must be greater than the current one.
    function setUnbondingPeriod(uint64 newPeriod) external;

    /// @notice Sets the base stake and the stake per compute unit. Needs DEFAULT_ADMIN_ROLE.
    /// Emits {MinStakeUpdated} and {StakePerComputeUnitUpdated}.
    /// @param newMinStake Base stake of a provider with compute units.
    /// @param newStakePerComputeUnit Stake per registered compute unit.
    function setStakeParams(uint256 newMinStake, uint256 newStakePerComputeUnit) external;

    /// @notice The staked token.
    /// @return The token address.
    function token() external view returns (address);

    /// @notice The work ledger consulted before a withdrawal (zero until set).
    /// @return The ledger address.
    function workLedger() external view returns (address);

    /// @notice The ComputeRegistry consulted for compute units (zero until set).
    /// @return The registry address.
    function computeRegistry() external view returns (address);

    /// @notice Active (bonded) stake of `provider`.
    /// @param provider The provider.
    /// @return The active stake.
    function activeStake(address provider) external view returns (uint256);

    /// @notice The unbonding bucket of `provider`.
    /// @param provider The provider.
    /// @return amount Tokens unbonding.
    /// @return maturesAt Unix time from which they can be withdrawn (0 if never unbonded).
    function unbonding(address provider) external view returns (uint256 amount, uint64 maturesAt);

    /// @notice Stake `provider` must keep active for its currently registered compute units.
    /// @param provider The provider.
    /// @return minStake + stakePerComputeUnit * providerComputeUnits(provider).
    function requiredStake(address provider) external view returns (uint256);

    /// @notice Stake required for `computeUnits` registered compute units.
    /// @param computeUnits Total compute units.
    /// @return minStake + stakePerComputeUnit * computeUnits.
    function requiredStakeFor(uint256 computeUnits) external view returns (uint256);

    /// @notice Seconds between unbond and withdrawal.
    /// @return The unbonding period.
    function unbondingPeriod() external view returns (uint64);

    /// @notice Base stake of a provider with compute units.
    /// @return The minimum stake.
    function minStake() external view returns (uint256);

    /// @notice Stake required per registered compute unit.
    /// @return The stake per compute unit.
    function stakePerComputeUnit() external view returns (uint256);
}

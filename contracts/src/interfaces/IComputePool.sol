// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {IWorkLedger} from "./IWorkLedger.sol";

/// @title IComputePool
/// @notice Compute pools: funded reward budgets, invite-only membership, work submissions keyed by the
/// file's sha256, batch attestation by validators, invalidation with slashing, permissionless
/// finalization after a dispute window, reward withdrawal and chain-anchored checkpoints.
interface IComputePool is IWorkLedger {
    /// @notice Life cycle of a pool: Created -> Active -> Closed (Created -> Closed also allowed).
    enum PoolStatus {
        None,
        Created,
        Active,
        Closed
    }

    /// @notice State of a node in a pool. Slashed is terminal and forfeits the node's unfinalized work.
    enum MemberState {
        None,
        Active,
        Left,
        Ejected,
        Slashed
    }

    /// @notice Life cycle of a submission: Pending -> Accepted -> Finalized | Forfeited, or
    /// Pending | Accepted (within the dispute window) -> Rejected -> Invalid once the pool's challenge
    /// window passes uncontested (at once when the window is 0), or back to the status it had when a
    /// quorum of other validators contests the rejection. Pending work of a Closed pool whose wind-up
    /// is over can be Expired (no pay, no slash).
    enum WorkStatus {
        None,
        Pending,
        Accepted,
        Invalid,
        Finalized,
        Forfeited,
        Rejected,
        Expired
    }

    /// @notice Parameters of a new pool.
    /// @param manager Key that signs invites, ejects/blacklists nodes and publishes checkpoints.
    /// @param treasury Receives the non-validator share of slashed stake.
    /// @param modelUri Model / task set description (off-chain URI).
    /// @param specSha256 sha256 of the pool spec the pool runs, zero for a pool without one (the
    /// devnet's `devnet://` pools). A spec pool's `modelUri` is `spec://<specSha256 in hex>`; the
    /// contract does not parse the URI: every role refuses a pool whose two disagree, off-chain.
    /// @param rewardPerUnit Provider reward per finalized work unit.
    /// @param validatorFee Fee per file of a finalized submission (one for submitWork, the file count of
    /// a bundle) paid to its attesting validator.
    /// @param slashAmount Stake taken from the provider per invalidated submission.
    /// @param disputeWindow Seconds after attestation before work can be finalized; < unbonding period.
    /// @param validatorSlashShareBps Share of slashed stake credited to the reporting validator (<= 10000).
    /// @param challengeWindow Seconds a rejection waits for contests before it slashes (0: it slashes at
    /// once); disputeWindow + challengeWindow < unbonding period, so every verdict's stake is still
    /// slashable when the verdict can be overturned.
    /// @param contestQuorum Contests by distinct staked validators that overturn a rejection (1 to 32;
    /// ignored when challengeWindow is 0).
    struct PoolParams {
        address manager;
        address treasury;
        string modelUri;
        bytes32 specSha256;
        uint256 rewardPerUnit;
        uint256 validatorFee;
        uint256 slashAmount;
        uint64 disputeWindow;
        uint16 validatorSlashShareBps;
        uint64 challengeWindow;
        uint16 contestQuorum;
    }

    /// @notice A pool as returned by {getPool}: its {PoolParams} as created (but the challenge rules,
    /// see {challengeRules}), its creator, status and budget.
    struct PoolInfo {
        address creator;
        address manager;
        address treasury;
        PoolStatus status;
        string modelUri;
        bytes32 specSha256;
        uint256 rewardPerUnit;
        uint256 validatorFee;
        uint256 slashAmount;
        uint64 disputeWindow;
        uint16 validatorSlashShareBps;
        uint256 budget;
    }

    /// @notice `provider` consented to its nodes joining `poolId`, and to up to `maxSlash` of its stake
    /// being slashed by that pool in total.
    /// @param poolId The pool.
    /// @param provider The consenting provider (the caller).
    /// @param maxSlash Total stake the pool may slash from the provider, over all its nodes and verdicts.
    event PoolApproved(uint256 indexed poolId, address indexed provider, uint256 maxSlash);

    /// @notice `provider` withdrew its consent: its nodes can no longer join `poolId`. Work already
    /// submitted stays slashable up to the agreed maximum.
    /// @param poolId The pool.
    /// @param provider The provider (the caller).
    event PoolApprovalRevoked(uint256 indexed poolId, address indexed provider);

    /// @notice Pool `poolId` gives rejections `challengeWindow` seconds to be contested, and
    /// `contestQuorum` contests overturn one. Emitted at creation, after {PoolCreated}.
    /// @param poolId The pool.
    /// @param challengeWindow Seconds between a rejection and its slash (0: slash at once).
    /// @param contestQuorum Contests that overturn a rejection.
    event PoolChallengeRules(uint256 indexed poolId, uint64 challengeWindow, uint16 contestQuorum);

    /// @notice The admin changed what a validator stakes and what an overturned verdict costs it.
    /// @param minValidatorStake Active stake (in the StakeManager) a validator needs for any verdict.
    /// @param validatorSlashAmount Stake taken from a validator per overturned verdict.
    event ValidatorStakeParamsUpdated(uint256 minValidatorStake, uint256 validatorSlashAmount);

    /// @notice `validator` attested a batch of `batchSize` work keys in `poolId` and committed to the
    /// evidence of its checks: `evidenceHash` is the sha256 of the batch's evidence (per key: file
    /// sha256, checks run, figures), which the validator keeps in the object store.
    /// @param poolId The pool.
    /// @param validator The attesting validator.
    /// @param evidenceHash sha256 of the batch's evidence.
    /// @param batchSize Keys in the batch (including skipped ones).
    event AttestationEvidence(
        uint256 indexed poolId, address indexed validator, bytes32 evidenceHash, uint256 batchSize
    );

    /// @notice `validator` rejected `workKey` for `reason`, committing to `evidenceHash` (sha256 of its
    /// evidence: file sha256, reason code, failing rows). The slash executes at `executableAt` unless a
    /// quorum of other validators contests it first; with a zero challenge window it executes in the
    /// same transaction ({WorkInvalidated} follows).
    /// @param poolId The pool.
    /// @param workKey The submission.
    /// @param validator The reporting validator.
    /// @param reason Reason code.
    /// @param evidenceHash sha256 of the evidence.
    /// @param executableAt Unix time from which {executeRejection} applies the slash.
    event WorkRejected(
        uint256 indexed poolId,
        bytes32 indexed workKey,
        address indexed validator,
        bytes32 reason,
        bytes32 evidenceHash,
        uint64 executableAt
    );

    /// @notice `validator` recomputed the rejected `workKey`, found it valid and contested the rejection.
    /// @param poolId The pool.
    /// @param workKey The submission.
    /// @param validator The contesting validator.
    /// @param evidenceHash sha256 of its evidence.
    /// @param contests Contests so far, this one included.
    event RejectionContested(
        uint256 indexed poolId,
        bytes32 indexed workKey,
        address indexed validator,
        bytes32 evidenceHash,
        uint256 contests
    );

    /// @notice A quorum contested the rejection of `workKey` by `validator`: the submission is back in
    /// `restored` (Pending or Accepted, with its earlier validator and times), and nothing was slashed
    /// from its provider. {ValidatorSlashed} follows.
    /// @param poolId The pool.
    /// @param workKey The submission.
    /// @param validator The validator whose rejection was overturned.
    /// @param restored The status the submission is back in.
    event RejectionOverturned(
        uint256 indexed poolId, bytes32 indexed workKey, address indexed validator, WorkStatus restored
    );

    /// @notice `validator`'s verdict on `workKey` was overturned; `amount` of its stake went to
    /// `beneficiary`, one of the validators who proved it wrong. The slash (the validatorSlashAmount, or
    /// what is left of the stake) is split evenly between the contesters of an overturned rejection,
    /// one event each, or goes whole to the reporter when an attested submission is invalidated.
    /// @param poolId The pool.
    /// @param workKey The submission.
    /// @param validator The slashed validator.
    /// @param beneficiary The validator credited.
    /// @param amount Tokens credited to `beneficiary`'s reward balance.
    event ValidatorSlashed(
        uint256 indexed poolId, bytes32 indexed workKey, address indexed validator, address beneficiary, uint256 amount
    );

    /// @notice The creator took back the part of a Closed pool's budget that no attested work needs.
    /// @param poolId The pool.
    /// @param creator The pool's creator, who received `amount`.
    /// @param amount Tokens refunded.
    /// @param budget The budget left (what attested work still needs).
    event PoolBudgetRefunded(uint256 indexed poolId, address indexed creator, uint256 amount, uint256 budget);

    /// @notice Pending `workKey` of a Closed pool was never judged within the wind-up and is settled
    /// without pay or slash; its provider's stake is no longer held for it.
    /// @param poolId The pool.
    /// @param workKey The submission.
    /// @param node The submitting node.
    event WorkExpired(uint256 indexed poolId, bytes32 indexed workKey, address indexed node);

    /// @notice A key of an attestWork or finalizeWork batch was left alone: another transaction
    /// already moved it past the state the batch expects (attested, invalidated or settled first).
    /// The rest of the batch goes through.
    /// @param poolId The pool.
    /// @param workKey The skipped submission.
    /// @param status Its status, which the batch did not change.
    event WorkSkipped(uint256 indexed poolId, bytes32 indexed workKey, WorkStatus status);

    /// @notice Pool `poolId` was created by `creator`.
    /// @dev Indexed (an event has at most three topics): `poolId`; `manager`, the key every role
    /// trusts for the pool (validators serve pools by manager, the orchestrator finds the pools its
    /// key manages, invites and checkpoints are signed by it), so a client without an indexer finds
    /// a manager's pools with one log filter, while `creator` is the transaction's sender and pays
    /// in; and `specSha256`, so anyone finds every pool that runs a given spec.
    /// @param poolId The new pool id (from 1).
    /// @param creator The caller.
    /// @param manager The pool's manager key.
    /// @param treasury Receiver of slashed stake.
    /// @param modelUri Model / task set URI.
    /// @param specSha256 sha256 of the pool spec (zero: no spec); see {PoolParams}.
    /// @param rewardPerUnit Reward per work unit.
    /// @param validatorFee Fee per finalized submission.
    /// @param slashAmount Slash per invalid submission.
    /// @param disputeWindow Dispute window in seconds.
    /// @param validatorSlashShareBps Validator share of slashed stake in basis points.
    event PoolCreated(
        uint256 indexed poolId,
        address creator,
        address indexed manager,
        address treasury,
        string modelUri,
        bytes32 indexed specSha256,
        uint256 rewardPerUnit,
        uint256 validatorFee,
        uint256 slashAmount,
        uint64 disputeWindow,
        uint16 validatorSlashShareBps
    );

    /// @notice `funder` added `amount` to the budget of `poolId`.
    /// @param poolId The pool.
    /// @param funder The caller.
    /// @param amount Tokens added.
    /// @param budget The budget after the call.
    event PoolFunded(uint256 indexed poolId, address indexed funder, uint256 amount, uint256 budget);

    /// @notice Pool `poolId` became Active.
    /// @param poolId The pool.
    /// @param by The creator or manager.
    event PoolStarted(uint256 indexed poolId, address indexed by);

    /// @notice Pool `poolId` was closed: no more joins or submissions; pending work still settles.
    /// @param poolId The pool.
    /// @param by The creator or manager.
    event PoolClosed(uint256 indexed poolId, address indexed by);

    /// @notice `node` of `provider` joined `poolId` with the invite `inviteDigest`.
    /// @param poolId The pool.
    /// @param node The node.
    /// @param provider The node's provider (bound to the node in this pool from now on).
    /// @param inviteDigest The consumed invite's EIP-712 digest.
    event NodeJoined(uint256 indexed poolId, address indexed node, address indexed provider, bytes32 inviteDigest);

    /// @notice `node` left `poolId` (by its provider).
    /// @param poolId The pool.
    /// @param node The node.
    /// @param provider The node's provider.
    event NodeLeft(uint256 indexed poolId, address indexed node, address indexed provider);

    /// @notice `node` was removed from `poolId`: by the manager (`slashed` false) or for invalid
    /// work (`slashed` true, terminal; its unfinalized work is forfeited).
    /// @param poolId The pool.
    /// @param node The node.
    /// @param provider The node's provider.
    /// @param slashed True when ejected by an invalidation.
    event NodeEjected(uint256 indexed poolId, address indexed node, address indexed provider, bool slashed);

    /// @notice The manager blacklisted `node` in `poolId`; it can no longer join.
    /// @param poolId The pool.
    /// @param node The node.
    event NodeBlacklisted(uint256 indexed poolId, address indexed node);

    /// @notice `node` submitted the file `workKey` (its sha256) to `poolId`; status Pending.
    /// @param poolId The pool.
    /// @param workKey sha256 of the rollout file.
    /// @param node The submitting node.
    /// @param provider The node's provider.
    /// @param workUnits Claimed work units.
    /// @param modelVersion Checkpoint version the rollouts were generated with.
    event WorkSubmitted(
        uint256 indexed poolId,
        bytes32 indexed workKey,
        address indexed node,
        address provider,
        uint64 workUnits,
        uint32 modelVersion
    );

    /// @notice `node` submitted a bundle of rollout files to `poolId` as one submission `workKey`;
    /// status Pending. The files are judged, paid and slashed together under `workKey`; their keys and
    /// units are recorded here only (not in storage).
    /// @param poolId The pool.
    /// @param workKey The bundle key: keccak256(abi.encodePacked(fileKeys, fileUnits)).
    /// @param node The submitting node.
    /// @param provider The node's provider.
    /// @param workUnits Sum of `fileUnits`.
    /// @param modelVersion Checkpoint version every file's rollouts were generated with.
    /// @param fileKeys sha256 of each rollout file, strictly ascending.
    /// @param fileUnits Claimed work units of each file (same order, each > 0).
    event WorkBundleSubmitted(
        uint256 indexed poolId,
        bytes32 indexed workKey,
        address indexed node,
        address provider,
        uint64 workUnits,
        uint32 modelVersion,
        bytes32[] fileKeys,
        uint64[] fileUnits
    );

    /// @notice `validator` accepted `workKey`; its dispute window starts at this block's time.
    /// @param poolId The pool.
    /// @param workKey The submission.
    /// @param validator The VALIDATOR_ROLE holder.
    event WorkAttested(uint256 indexed poolId, bytes32 indexed workKey, address indexed validator);

    /// @notice `validator` invalidated `workKey` of `node` for `reason`.
    /// @param poolId The pool.
    /// @param workKey The submission.
    /// @param node The submitting node.
    /// @param validator The reporting validator.
    /// @param reason Reason code (e.g. a short ASCII code, right-padded).
    event WorkInvalidated(
        uint256 indexed poolId,
        bytes32 indexed workKey,
        address indexed node,
        address validator,
        bytes32 reason
    );

    /// @notice The stake slashed for `workKey` was split: `validatorShare` credited to `validator`'s
    /// reward balance, `treasuryShare` transferred to `treasury`.
    /// @param poolId The pool.
    /// @param workKey The invalid submission.
    /// @param provider The slashed provider.
    /// @param validator The reporting validator.
    /// @param validatorShare Tokens credited to the validator.
    /// @param treasury The pool treasury.
    /// @param treasuryShare Tokens transferred to the treasury.
    event SlashDistributed(
        uint256 indexed poolId,
        bytes32 indexed workKey,
        address indexed provider,
        address validator,
        uint256 validatorShare,
        address treasury,
        uint256 treasuryShare
    );

    /// @notice `workKey` was finalized: `reward` credited to `provider`, `validatorFee` to `validator`,
    /// both taken from the pool budget.
    /// @param poolId The pool.
    /// @param workKey The submission.
    /// @param node The submitting node.
    /// @param provider The node's provider.
    /// @param reward workUnits * rewardPerUnit.
    /// @param validator The attesting validator.
    /// @param validatorFee The pool's validator fee times the submission's files.
    event WorkFinalized(
        uint256 indexed poolId,
        bytes32 indexed workKey,
        address indexed node,
        address provider,
        uint256 reward,
        address validator,
        uint256 validatorFee
    );

    /// @notice Accepted `workKey` of a slashed `node` was settled without payment.
    /// @param poolId The pool.
    /// @param workKey The submission.
    /// @param node The slashed node.
    event WorkForfeited(uint256 indexed poolId, bytes32 indexed workKey, address indexed node);

    /// @notice `account` withdrew `amount` of credited rewards, fees and slash shares.
    /// @param account The caller.
    /// @param amount Tokens transferred.
    event RewardsWithdrawn(address indexed account, uint256 amount);

    /// @notice Checkpoint `version` of `poolId` has the manifest `manifestSha256` at `uri`.
    /// @param poolId The pool.
    /// @param version The checkpoint version (strictly increasing per pool).
    /// @param manifestSha256 sha256 of the checkpoint manifest.
    /// @param uri Where the manifest is stored.
    event CheckpointPublished(uint256 indexed poolId, uint32 indexed version, bytes32 manifestSha256, string uri);

    /// @notice The challenge window is not shorter than the unbonding period minus the dispute window,
    /// or the quorum is outside 1..32 while the window is not zero.
    /// @param challengeWindow The window given.
    /// @param contestQuorum The quorum given.
    /// @param unbondingPeriod The StakeManager's unbonding period.
    error ComputePoolInvalidChallengeRules(uint64 challengeWindow, uint16 contestQuorum, uint64 unbondingPeriod);

    /// @notice A validator slash larger than the validator stake it is taken from.
    /// @param minValidatorStake The minimum validator stake given.
    /// @param validatorSlashAmount The slash given.
    error ComputePoolInvalidValidatorSlash(uint256 minValidatorStake, uint256 validatorSlashAmount);

    /// @notice A verdict from a validator whose active stake is below the minimum.
    /// @param validator The caller.
    /// @param stake Its active stake.
    /// @param required The minimum validator stake.
    error ComputePoolValidatorUnderstaked(address validator, uint256 stake, uint256 required);

    /// @notice The submission is not Rejected (never rejected, or executed or overturned already).
    /// @param poolId The pool.
    /// @param workKey The submission.
    /// @param status Its status.
    error ComputePoolWorkNotRejected(uint256 poolId, bytes32 workKey, WorkStatus status);

    /// @notice The rejection can still be contested; it executes at `executableAt`.
    /// @param poolId The pool.
    /// @param workKey The submission.
    /// @param executableAt When the challenge window closes.
    error ComputePoolChallengeWindowOpen(uint256 poolId, bytes32 workKey, uint64 executableAt);

    /// @notice The challenge window closed at `closedAt`: the rejection can only be executed now.
    /// @param poolId The pool.
    /// @param workKey The submission.
    /// @param closedAt When the challenge window closed.
    error ComputePoolChallengeWindowClosed(uint256 poolId, bytes32 workKey, uint64 closedAt);

    /// @notice `validator` contested this rejection already.
    /// @param poolId The pool.
    /// @param workKey The submission.
    /// @param validator The caller.
    error ComputePoolAlreadyContested(uint256 poolId, bytes32 workKey, address validator);

    /// @notice The pool is not Closed.
    /// @param poolId The pool.
    /// @param status Its status.
    error ComputePoolNotClosed(uint256 poolId, PoolStatus status);

    /// @notice The Closed pool's wind-up (one dispute window after closing) runs until `endsAt`.
    /// @param poolId The pool.
    /// @param endsAt When refunds and expiries become possible.
    error ComputePoolWindUpNotOver(uint256 poolId, uint64 endsAt);

    /// @notice Attested work needs the whole budget: there is nothing to refund.
    /// @param poolId The pool.
    error ComputePoolNothingToRefund(uint256 poolId);

    /// @notice A zero address was given where a contract or account is needed.
    error ComputePoolZeroAddress();

    /// @notice The pool token differs from the StakeManager's token.
    /// @param token The token given.
    /// @param stakeToken The StakeManager's token.
    error ComputePoolTokenMismatch(address token, address stakeToken);

    /// @notice The dispute window must be shorter than the unbonding period (so slashing can reach
    /// stake unbonded right after the work was accepted).
    /// @param disputeWindow The refused window.
    /// @param unbondingPeriod The StakeManager's unbonding period.
    error ComputePoolInvalidDisputeWindow(uint64 disputeWindow, uint64 unbondingPeriod);

    /// @notice The validator share of slashed stake exceeds 10000 basis points.
    /// @param bps The refused share.
    error ComputePoolInvalidSlashShare(uint16 bps);

    /// @notice No pool has id `poolId`.
    /// @param poolId The pool id.
    error ComputePoolUnknownPool(uint256 poolId);

    /// @notice A zero amount was given.
    error ComputePoolZeroAmount();

    /// @notice Pool `poolId` is closed.
    /// @param poolId The pool.
    error ComputePoolClosed(uint256 poolId);

    /// @notice `caller` is neither the creator nor the manager of `poolId`.
    /// @param poolId The pool.
    /// @param caller The caller.
    error ComputePoolNotCreatorOrManager(uint256 poolId, address caller);

    /// @notice `caller` is not the manager of `poolId`.
    /// @param poolId The pool.
    /// @param caller The caller.
    error ComputePoolNotManager(uint256 poolId, address caller);

    /// @notice Pool `poolId` is not in status Created.
    /// @param poolId The pool.
    /// @param status Its status.
    error ComputePoolAlreadyStarted(uint256 poolId, PoolStatus status);

    /// @notice Pool `poolId` is not Active.
    /// @param poolId The pool.
    /// @param status Its status.
    error ComputePoolNotActive(uint256 poolId, PoolStatus status);

    /// @notice The invite expired at `expiry`.
    /// @param poolId The pool.
    /// @param node The invited node.
    /// @param expiry The invite's expiry (unix time).
    error ComputePoolInviteExpired(uint256 poolId, address node, uint256 expiry);

    /// @notice The invite with digest `digest` was used already.
    /// @param digest The invite's EIP-712 digest.
    error ComputePoolInviteAlreadyUsed(bytes32 digest);

    /// @notice The invite was signed by `recovered`, not by the pool's `manager`.
    /// @param poolId The pool.
    /// @param recovered The recovered signer (zero for a malformed signature).
    /// @param manager The pool's manager.
    error ComputePoolInvalidInviteSigner(uint256 poolId, address recovered, address manager);

    /// @notice `node` is blacklisted in `poolId`.
    /// @param poolId The pool.
    /// @param node The node.
    error ComputePoolNodeBlacklisted(uint256 poolId, address node);

    /// @notice `node` was slashed in `poolId` and cannot rejoin it.
    /// @param poolId The pool.
    /// @param node The node.
    error ComputePoolNodeSlashed(uint256 poolId, address node);

    /// @notice `node` is not active in the ComputeRegistry (or no longer under its pool provider).
    /// @param node The node.
    error ComputePoolNodeInactive(address node);

    /// @notice `caller` is not the provider of `node`.
    /// @param poolId The pool.
    /// @param node The node.
    /// @param caller The caller.
    error ComputePoolNotNodeProvider(uint256 poolId, address node, address caller);

    /// @notice `node` is an active member of `poolId` already.
    /// @param poolId The pool.
    /// @param node The node.
    error ComputePoolAlreadyMember(uint256 poolId, address node);

    /// @notice `node` is bound to `boundProvider` in `poolId`; it cannot rejoin under `provider`.
    /// @param poolId The pool.
    /// @param node The node.
    /// @param boundProvider The provider it first joined with.
    /// @param provider The node's current provider.
    error ComputePoolProviderMismatch(uint256 poolId, address node, address boundProvider, address provider);

    /// @notice `node` is not an active member of `poolId`.
    /// @param poolId The pool.
    /// @param node The node.
    error ComputePoolNotMember(uint256 poolId, address node);

    /// @notice `node` is blacklisted in `poolId` already.
    /// @param poolId The pool.
    /// @param node The node.
    error ComputePoolNodeAlreadyBlacklisted(uint256 poolId, address node);

    /// @notice Work must be submitted by the node's own key.
    /// @param node The node named in the call.
    /// @param caller The caller.
    error ComputePoolCallerNotNode(address node, address caller);

    /// @notice A bundle must hold 1 to MAX_BUNDLE_FILES files, as many units as keys, and its keys
    /// strictly ascending (which also makes every file of a bundle distinct).
    /// @param poolId The pool.
    /// @param keys Number of file keys given.
    /// @param units Number of file units given.
    error ComputePoolBadBundle(uint256 poolId, uint256 keys, uint256 units);

    /// @notice The files of a bundle claim more work units than a submission records (2^64 - 1).
    /// @param poolId The pool.
    /// @param workUnits The sum claimed.
    error ComputePoolBundleUnitsOverflow(uint256 poolId, uint256 workUnits);

    /// @notice A submission must claim at least one work unit.
    /// @param poolId The pool.
    /// @param workKey The submission.
    error ComputePoolZeroWorkUnits(uint256 poolId, bytes32 workKey);

    /// @notice `workKey` was submitted to `poolId` already.
    /// @param poolId The pool.
    /// @param workKey The submission.
    error ComputePoolDuplicateWork(uint256 poolId, bytes32 workKey);

    /// @notice A batch must hold at least one work key.
    /// @param poolId The pool.
    error ComputePoolEmptyBatch(uint256 poolId);

    /// @notice `workKey` is in `status`, not Pending.
    /// @param poolId The pool.
    /// @param workKey The submission.
    /// @param status Its status.
    error ComputePoolWorkNotPending(uint256 poolId, bytes32 workKey, WorkStatus status);

    /// @notice `workKey` is in `status`; only Pending or Accepted work can be invalidated.
    /// @param poolId The pool.
    /// @param workKey The submission.
    /// @param status Its status.
    error ComputePoolWorkNotDisputable(uint256 poolId, bytes32 workKey, WorkStatus status);

    /// @notice The dispute window of accepted `workKey` closed at `closedAt`.
    /// @param poolId The pool.
    /// @param workKey The submission.
    /// @param closedAt attestedAt + disputeWindow.
    error ComputePoolDisputeWindowClosed(uint256 poolId, bytes32 workKey, uint64 closedAt);

    /// @notice `workKey` is in `status`, not Accepted.
    /// @param poolId The pool.
    /// @param workKey The submission.
    /// @param status Its status.
    error ComputePoolWorkNotAccepted(uint256 poolId, bytes32 workKey, WorkStatus status);

    /// @notice `workKey` can be finalized only from `finalizableAt`.
    /// @param poolId The pool.
    /// @param workKey The submission.
    /// @param finalizableAt attestedAt + disputeWindow.
    error ComputePoolDisputeWindowOpen(uint256 poolId, bytes32 workKey, uint64 finalizableAt);

    /// @notice The pool budget cannot pay the next key of a finalizeWork batch.
    /// @param poolId The pool.
    /// @param needed Reward plus validator fee of the failing key.
    /// @param available Budget left after the earlier keys of the batch.
    error ComputePoolBudgetExhausted(uint256 poolId, uint256 needed, uint256 available);

    /// @notice `account` has no credited balance.
    /// @param account The caller.
    error ComputePoolNothingToWithdraw(address account);

    /// @notice `provider` has not approved `poolId` (or revoked it): its nodes may not join.
    /// @param poolId The pool.
    /// @param provider The node's provider.
    error ComputePoolNotApproved(uint256 poolId, address provider);

    /// @notice An approval's `maxSlash` is below the pool's per-verdict `slashAmount`.
    /// @param poolId The pool.
    /// @param maxSlash The proposed maximum.
    /// @param slashAmount The pool's slash per invalid submission.
    error ComputePoolApprovalBelowSlash(uint256 poolId, uint256 maxSlash, uint256 slashAmount);

    /// @notice An approval may only raise the maximum slash (open work was submitted under it).
    /// @param poolId The pool.
    /// @param current The maximum already agreed.
    /// @param proposed The refused lower maximum.
    error ComputePoolApprovalLowered(uint256 poolId, uint256 current, uint256 proposed);

    /// @notice The caller is not a registered provider.
    /// @param account The caller.
    error ComputePoolNotProvider(address account);

    /// @notice A validator may not judge work of its own node or provider.
    /// @param poolId The pool.
    /// @param workKey The submission.
    /// @param validator The caller.
    error ComputePoolSelfVerdict(uint256 poolId, bytes32 workKey, address validator);

    /// @notice Checkpoint versions must increase: `proposed` <= `latest`.
    /// @param poolId The pool.
    /// @param latest The latest published version.
    /// @param proposed The refused version.
    error ComputePoolCheckpointVersionNotIncreasing(uint256 poolId, uint32 latest, uint32 proposed);

    /// @notice Creates a pool in status Created; the caller becomes its creator. Its `specSha256` is
    /// stored as given (zero: no spec), never parsed or compared with `modelUri` on-chain.
    /// Emits {PoolCreated}.
    /// @param params The pool parameters.
    /// @return poolId The new pool id (ids start at 1).
    function createPool(PoolParams calldata params) external returns (uint256 poolId);

    /// @notice Adds `amount` to the budget of `poolId`, pulling tokens from the caller (approve first).
    /// Anyone may fund a pool that is not closed. Emits {PoolFunded}.
    /// @param poolId The pool.
    /// @param amount Tokens to add (> 0).
    function fundPool(uint256 poolId, uint256 amount) external;

    /// @notice Opens `poolId` for joins and submissions. Creator or manager only. Emits {PoolStarted}.
    /// @param poolId A pool in status Created.
    function startPool(uint256 poolId) external;

    /// @notice Closes `poolId` to joins and submissions; submitted work still settles. Creator or
    /// manager only. Emits {PoolClosed}.
    /// @param poolId A pool not yet closed.
    function closePool(uint256 poolId) external;

    /// @notice Lets the caller's nodes join `poolId` and commits up to `maxSlash` of the caller's stake to
    /// it: the pool's slashes of this provider, over all its nodes, never total more. Registered
    /// providers only; the pool must exist and not be closed; `maxSlash` >= the pool's slashAmount and
    /// >= any maximum approved before (a provider can raise it, never lower it under submitted work).
    /// Emits {PoolApproved}.
    /// @param poolId The pool.
    /// @param maxSlash Total stake the pool may slash from the caller.
    function approvePool(uint256 poolId, uint256 maxSlash) external;

    /// @notice Withdraws the caller's approval of `poolId`: its nodes can no longer join (members stay
    /// members until they leave or the provider removes them). Emits {PoolApprovalRevoked}.
    /// @param poolId A pool the caller approved.
    function revokePoolApproval(uint256 poolId) external;

    /// @notice Joins `node` to `poolId` with an invite signed by the pool manager. The caller must be the
    /// node's provider in the registry or the node itself (a worker joins on its own), and the provider
    /// must have approved the pool ({approvePool}): a node key alone cannot commit its provider's
    /// stake to a pool. Checked in order: expiry, single use, signer, blacklist and slash, registry,
    /// approval, pool status, membership. Emits {NodeJoined}.
    /// @param poolId The pool.
    /// @param node The node.
    /// @param nonce Invite nonce chosen by the manager (makes each invite unique).
    /// @param expiry Unix time after which the invite is refused.
    /// @param signature The manager's EIP-712 signature over Invite(poolId,node,nonce,expiry).
    function joinPool(uint256 poolId, address node, uint256 nonce, uint256 expiry, bytes calldata signature)
        external;

    /// @notice Removes `node` from `poolId` at its provider's request. Its submitted work still settles.
    /// Emits {NodeLeft}.
    /// @param poolId The pool.
    /// @param node An active member whose provider is the caller.
    function leavePool(uint256 poolId, address node) external;

    /// @notice Removes `node` from `poolId`. Manager only. Its submitted work still settles.
    /// Emits {NodeEjected} with slashed false.
    /// @param poolId The pool.
    /// @param node An active member.
    function ejectNode(uint256 poolId, address node) external;

    /// @notice Bars `node` from `poolId` (ejecting it if it is a member). Manager only.
    /// Emits {NodeBlacklisted} (and {NodeEjected} for a member).
    /// @param poolId The pool.
    /// @param node Any node address.
    function blacklistNode(uint256 poolId, address node) external;

    /// @notice Records a submission (status Pending). The caller must be `node` itself, an active member
    /// of the active pool and still active under the same provider in the registry. Emits {WorkSubmitted}.
    /// @param poolId The pool.
    /// @param node The node (== msg.sender).
    /// @param workKey sha256 of the uploaded file; unique per pool.
    /// @param workUnits Claimed work units (> 0).
    /// @param modelVersion Checkpoint version used.
    function submitWork(uint256 poolId, address node, bytes32 workKey, uint64 workUnits, uint32 modelVersion)
        external;

    /// @notice Records a bundle of rollout files as one submission (status Pending) whose key is
    /// keccak256(abi.encodePacked(fileKeys, fileUnits)) and whose work units are the files' sum. The
    /// caller checks are {submitWork}'s. Every verdict and settlement function takes the bundle key: the
    /// bundle is accepted, invalidated (slashing and ejecting the node once) or paid as a whole, and its
    /// validator fee is the pool's validatorFee per file. Emits {WorkBundleSubmitted}.
    /// @param poolId The pool.
    /// @param node The node (== msg.sender).
    /// @param fileKeys sha256 of each uploaded file, strictly ascending; 1 to MAX_BUNDLE_FILES of them.
    /// @param fileUnits Claimed work units of each file, same length, each > 0.
    /// @param modelVersion Checkpoint version used by every file.
    /// @return workKey The bundle key; unique per pool.
    function submitWorkBundle(
        uint256 poolId,
        address node,
        bytes32[] calldata fileKeys,
        uint64[] calldata fileUnits,
        uint32 modelVersion
    ) external returns (bytes32 workKey);

    /// @notice Accepts Pending submissions; each key's dispute window starts now. Needs VALIDATOR_ROLE
    /// and the minimum validator stake. A key no longer Pending (judged by another transaction first)
    /// is skipped with {WorkSkipped}; the batch reverts for a key never submitted, or if the caller is
    /// the node or the provider of one ({ComputePoolSelfVerdict}). Emits {AttestationEvidence} once
    /// and {WorkAttested} per accepted key. If an attested key is later invalidated, the attester's
    /// stake is slashed ({ValidatorSlashed}).
    /// @param poolId The pool.
    /// @param workKeys Non-empty list of Pending submissions.
    /// @param evidenceHash sha256 of the batch's evidence.
    function attestWork(uint256 poolId, bytes32[] calldata workKeys, bytes32 evidenceHash) external;

    /// @notice Rejects a Pending submission, or an Accepted one within its dispute window. Needs
    /// VALIDATOR_ROLE and the minimum validator stake; the caller may not be the node or its provider.
    /// With the pool's challenge window at 0 the rejection executes at once (see {executeRejection});
    /// otherwise the submission is Rejected until the window closes or a quorum contests it.
    /// Emits {WorkRejected}.
    /// @param poolId The pool.
    /// @param workKey The submission.
    /// @param reason Reason code.
    /// @param evidenceHash sha256 of the evidence.
    function invalidateWork(uint256 poolId, bytes32 workKey, bytes32 reason, bytes32 evidenceHash) external;

    /// @notice Contests a rejection within its challenge window, after recomputing the submission and
    /// finding it valid. Needs VALIDATOR_ROLE and the minimum validator stake; the caller may not be
    /// the reporter, the node or its provider, and contests once. The contest that reaches the pool's
    /// quorum overturns the rejection: the submission returns to the status, validator and times it
    /// had, and the reporter is slashed the validatorSlashAmount, split between the contesters.
    /// Emits {RejectionContested}, then {RejectionOverturned} and {ValidatorSlashed} at the quorum.
    /// @param poolId The pool.
    /// @param workKey The rejected submission.
    /// @param evidenceHash sha256 of the contester's evidence.
    function contestRejection(uint256 poolId, bytes32 workKey, bytes32 evidenceHash) external;

    /// @notice Executes an uncontested rejection once its challenge window has passed. Anyone may call.
    /// Marks the submission Invalid, ejects the node as Slashed (forfeiting its other unfinalized
    /// work), slashes the provider by the pool's slashAmount, capped by what remains of the maximum the
    /// provider approved for the pool (unbonding first), and splits the slashed tokens between the
    /// reporter (credited) and the pool treasury (transferred). If the submission had been attested,
    /// the attester is slashed the validatorSlashAmount, credited to the reporter.
    /// Emits {WorkInvalidated}, {NodeEjected} (first slash of the node), {SlashDistributed}, and
    /// {ValidatorSlashed} for an attested submission.
    /// @param poolId The pool.
    /// @param workKey The rejected submission.
    function executeRejection(uint256 poolId, bytes32 workKey) external;

    /// @notice Sets the stake every verdict needs and what an overturned verdict costs (admin only).
    /// Emits {ValidatorStakeParamsUpdated}.
    /// @param minValidatorStake Active stake a validator needs for any verdict (0: none).
    /// @param validatorSlashAmount Stake taken per overturned verdict (<= minValidatorStake).
    function setValidatorStakeParams(uint256 minValidatorStake, uint256 validatorSlashAmount) external;

    /// @notice Settles Accepted submissions whose dispute window passed: credits the provider
    /// workUnits * rewardPerUnit and the attesting validator the pool's validatorFee per file from the
    /// budget, or, for a slashed node, pays nothing (Forfeited). Anyone may call. A key already settled or
    /// invalidated by another transaction is skipped with {WorkSkipped}; the batch reverts on a key
    /// never submitted or still Pending, still in its window, or not covered by the budget.
    /// Emits {WorkFinalized} or {WorkForfeited} per settled key.
    /// @param poolId The pool.
    /// @param workKeys Non-empty list of Accepted submissions.
    function finalizeWork(uint256 poolId, bytes32[] calldata workKeys) external;

    /// @notice Refunds to the creator the budget no attested work needs, once the pool is Closed and
    /// its wind-up (one dispute window after closing) is over. Creator or manager only; the tokens go
    /// to the creator. Emits {PoolBudgetRefunded}.
    /// @param poolId The pool.
    /// @return amount Tokens refunded.
    function refundBudget(uint256 poolId) external returns (uint256 amount);

    /// @notice Settles Pending work of a Closed pool whose wind-up is over as Expired: no pay, no
    /// slash, the provider's stake no longer held for it. Anyone may call. A key no longer Pending is
    /// skipped with {WorkSkipped}; a key never submitted reverts. Emits {WorkExpired} per key.
    /// @param poolId The pool.
    /// @param workKeys Non-empty list of Pending submissions.
    function expireWork(uint256 poolId, bytes32[] calldata workKeys) external;

    /// @notice Transfers the caller's whole credited balance (rewards, fees, slash shares).
    /// Emits {RewardsWithdrawn}.
    /// @return amount Tokens transferred.
    function withdrawRewards() external returns (uint256 amount);

    /// @notice Anchors checkpoint `version` of `poolId`. Manager only; versions strictly increase (the
    /// first may be 0). Emits {CheckpointPublished}.
    /// @param poolId The pool.
    /// @param version The checkpoint version.
    /// @param manifestSha256 sha256 of the manifest file.
    /// @param uri Where the manifest is stored.
    function publishCheckpoint(uint256 poolId, uint32 version, bytes32 manifestSha256, string calldata uri)
        external;

    /// @notice The pool record.
    /// @param poolId The pool.
    /// @return The pool (status None if it does not exist).
    function getPool(uint256 poolId) external view returns (PoolInfo memory);

    /// @notice Number of pools created (the last pool id).
    /// @return The pool count.
    function poolCount() external view returns (uint256);

    /// @notice Membership of `node` in `poolId`.
    /// @param poolId The pool.
    /// @param node The node.
    /// @return provider Provider bound at first join (zero if never joined).
    /// @return state Current member state.
    /// @return blacklisted Whether the manager blacklisted the node.
    /// @return since Unix time of the last state change.
    function getMember(uint256 poolId, address node)
        external
        view
        returns (address provider, MemberState state, bool blacklisted, uint64 since);

    /// @notice A submission.
    /// @param poolId The pool.
    /// @param workKey The submission.
    /// @return node The submitting node.
    /// @return provider The node's provider in the pool.
    /// @return status Current status.
    /// @return workUnits Claimed work units.
    /// @return modelVersion Checkpoint version used.
    /// @return submittedAt Unix time of submission.
    /// @return statusSince Unix time of the last status change (attestedAt while Accepted).
    /// @return validator Validator that set the status (attester; reporter for Invalid).
    function getWork(uint256 poolId, bytes32 workKey)
        external
        view
        returns (
            address node,
            address provider,
            WorkStatus status,
            uint64 workUnits,
            uint32 modelVersion,
            uint64 submittedAt,
            uint64 statusSince,
            address validator
        );

    /// @notice How many rollout files a submission holds: 1 for {submitWork}, the file count for
    /// {submitWorkBundle}, 0 for a key never submitted. Fees are reserved and paid per file.
    /// @param poolId The pool.
    /// @param workKey The submission.
    /// @return The number of files.
    function workFiles(uint256 poolId, bytes32 workKey) external view returns (uint256);

    /// @notice The consent of `provider` to `poolId`.
    /// @param poolId The pool.
    /// @param provider The provider.
    /// @return maxSlash Total stake the pool may slash from the provider (0: never approved).
    /// @return slashed Stake the pool has slashed from the provider so far.
    /// @return approved Whether its nodes may join now (false after {revokePoolApproval}).
    function poolApproval(uint256 poolId, address provider)
        external
        view
        returns (uint256 maxSlash, uint256 slashed, bool approved);

    /// @notice Credited, withdrawable balance of `account`.
    /// @param account The account.
    /// @return The balance.
    function rewardBalance(address account) external view returns (uint256);

    /// @notice Whether `node` is blacklisted in `poolId`.
    /// @param poolId The pool.
    /// @param node The node.
    /// @return True if blacklisted.
    function isBlacklisted(uint256 poolId, address node) external view returns (bool);

    /// @notice The latest published checkpoint of `poolId`.
    /// @param poolId The pool.
    /// @return version Its version.
    /// @return manifestSha256 sha256 of its manifest.
    /// @return uri Where the manifest is stored.
    /// @return publishedAt Unix time of publication (0 if none was published).
    function latestCheckpoint(uint256 poolId)
        external
        view
        returns (uint32 version, bytes32 manifestSha256, string memory uri, uint64 publishedAt);

    /// @notice The EIP-712 digest the pool manager signs to invite `node`.
    /// @param poolId The pool.
    /// @param node The invited node.
    /// @param nonce Invite nonce.
    /// @param expiry Invite expiry (unix time).
    /// @return The typed-data digest for this chain and this contract.
    function inviteDigest(uint256 poolId, address node, uint256 nonce, uint256 expiry)
        external
        view
        returns (bytes32);

    /// @notice Whether an invite digest was consumed.
    /// @param digest The invite digest.
    /// @return True if used.
    function isInviteUsed(bytes32 digest) external view returns (bool);

    /// @notice How long rejections in `poolId` wait for contests, and how many overturn one.
    /// @param poolId The pool.
    /// @return challengeWindow Seconds between a rejection and its slash.
    /// @return contestQuorum Contests that overturn a rejection.
    function challengeRules(uint256 poolId) external view returns (uint64 challengeWindow, uint16 contestQuorum);

    /// @notice A rejection waiting for its challenge window (all zero when `workKey` is not Rejected).
    /// @param poolId The pool.
    /// @param workKey The submission.
    /// @return validator The reporter.
    /// @return reason Its reason code.
    /// @return executableAt When it can be executed.
    /// @return previous The status a quorum of contests restores.
    /// @return contesters The validators who contested it so far.
    function getRejection(uint256 poolId, bytes32 workKey)
        external
        view
        returns (
            address validator,
            bytes32 reason,
            uint64 executableAt,
            WorkStatus previous,
            address[] memory contesters
        );

    /// @notice What the pool's attested work still needs from the budget, and when a Closed pool's
    /// wind-up ends (0 while it is not Closed).
    /// @param poolId The pool.
    /// @return reserved Rewards and fees of Accepted (and Rejected-after-attestation) work not yet settled.
    /// @return windUpEndsAt Close time plus the dispute window.
    function budgetReserved(uint256 poolId) external view returns (uint256 reserved, uint64 windUpEndsAt);

    /// @notice The stake every verdict needs and what an overturned verdict costs.
    /// @return minValidatorStake Active stake a validator needs.
    /// @return validatorSlashAmount Stake taken per overturned verdict.
    function validatorStakeParams() external view returns (uint256 minValidatorStake, uint256 validatorSlashAmount);

    /// @notice The reward token.
    /// @return The token address.
    function token() external view returns (address);

    /// @notice The StakeManager this pool slashes through.
    /// @return The stake manager address.
    function stakeManager() external view returns (address);

    /// @notice The ComputeRegistry consulted for nodes.
    /// @return The registry address.
    function registry() external view returns (address);
}

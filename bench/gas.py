"""Gas used by each proofpool contract operation, measured on a fresh anvil.

Prints one JSON line per operation and writes them to `bench/results/gas.jsonl`.
Batch operations (attestWork, finalizeWork) are measured at batch sizes 1, 16 and 128 and
reported per key as well. Targets (per the contract design): submitWork <= 90,000 gas;
attestWork and finalizeWork per key at batch 128 <= 12,000 and <= 15,000 gas.

Bundles (`submitWorkBundle`, many files as one submission): the submission at 1, 8, 32 and 128
files, attestWork and finalizeWork of 1 and of 16 bundles of 32 files, and the headline, the gas
per accepted file (submit + attest + finalize, amortized) with bundles of 32 files, target
<= 25,000, next to the same figure for single-file submissions.

Run: `make bench` or `.venv/bin/python bench/gas.py` (needs `make contracts` first).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eth_account import Account
from eth_account.signers.local import LocalAccount
from web3 import Web3

from proofpool.infra.chain.anvil import ANVIL_KEYS, start_anvil
from proofpool.infra.chain.artifacts import load_artifact
from proofpool.infra.chain.bindings import NO_EVIDENCE
from proofpool.infra.chain.bundles import bundle_key, canonical
from proofpool.infra.chain.deploy import TOKEN, AddressBook, DeployParams, deploy_contracts, grant_validator
from proofpool.infra.chain.rpc import connect
from proofpool.infra.chain.signing import sign_invite, sign_node_ownership
from proofpool.infra.chain.tx import TxSender

RESULTS = Path(__file__).resolve().parent / "results" / "gas.jsonl"
BATCHES = (1, 16, 128)
TARGETS = {"submitWork": 90_000, "attestWork": 12_000, "finalizeWork": 15_000}
"""Per-key targets; batch targets apply at batch 128."""
BUNDLE_SIZES = (1, 8, 32, 128)
BUNDLE_FILES = 32
"""Files per bundle of the headline figure."""
BUNDLE_BATCHES = (1, 16)
"""Bundles per attestWork / finalizeWork transaction of the headline figure."""
PER_FILE_TARGET = 25_000
"""Gas per accepted file (submit + attest + finalize) with bundles of BUNDLE_FILES files."""
FILE_UNITS = 4096
DISPUTE_WINDOW = 3600
CHALLENGE_WINDOW = 600


@dataclass
class Bench:
    w3: Web3
    book: AddressBook
    senders: dict[str, TxSender]
    rows: list[dict[str, Any]]

    def contract(self, name: str) -> Any:
        return self.w3.eth.contract(address=self.book.addresses[name], abi=load_artifact(name).abi)

    def send(self, who: str, fn: Any) -> int:
        return int(self.senders[who].send(fn)["gasUsed"])

    def row(self, row: dict[str, Any]) -> None:
        """Record a row built by the caller (the bundle figures)."""
        self.rows.append(row)
        print(json.dumps(row), flush=True)

    def record(self, op: str, gas: int, batch: int | None = None) -> None:
        row: dict[str, Any] = {"op": op, "gas": gas}
        if batch is not None:
            row["batch"] = batch
            row["gas_per_key"] = gas // batch
        target = TARGETS.get(op)
        if target is not None and (batch is None or batch == BATCHES[-1]):
            measured = row.get("gas_per_key", gas)
            row["target"] = target
            row["meets_target"] = measured <= target
        self.rows.append(row)
        print(json.dumps(row), flush=True)

    def increase_time(self, seconds: int) -> None:
        self.w3.provider.make_request("evm_increaseTime", [seconds])
        self.w3.provider.make_request("evm_mine", [])


def _work_key(i: int) -> bytes:
    return Web3.keccak(text=f"rollout-{i}")


def run(bench: Bench, node: LocalAccount, node2: LocalAccount) -> None:
    token, stake, registry, pool = (
        bench.contract(n) for n in ("PoolToken", "StakeManager", "ComputeRegistry", "ComputePool")
    )
    chain_id = bench.w3.eth.chain_id
    addr = {name: sender.address for name, sender in bench.senders.items()}
    for who in ("provider", "provider2", "creator"):
        bench.send("admin", token.functions.mint(addr[who], 10_000_000 * TOKEN))
    bench.send("provider", token.functions.approve(bench.book.stake_manager, 2**256 - 1))
    bench.send("provider2", token.functions.approve(bench.book.stake_manager, 2**256 - 1))
    bench.send("creator", token.functions.approve(bench.book.compute_pool, 2**256 - 1))

    bench.record("registerProvider", bench.send("provider", registry.functions.registerProvider()))
    bench.record("stake", bench.send("provider", stake.functions.stake(1_000 * TOKEN)))
    deadline = bench.w3.eth.get_block("latest")["timestamp"] + 3600
    proof = sign_node_ownership(
        node, addr["provider"], chain_id, bench.book.compute_registry, nonce=0, deadline=deadline
    )
    gas = bench.send("provider", registry.functions.addNode(node.address, 8, b"\x11" * 32, deadline, proof.signature))
    bench.record("addNode", gas)

    bench.send("provider2", registry.functions.registerProvider())
    bench.send("provider2", stake.functions.stake(1_000 * TOKEN))
    proof = sign_node_ownership(
        node2, addr["provider2"], chain_id, bench.book.compute_registry, nonce=0, deadline=deadline
    )
    bench.send("provider2", registry.functions.addNode(node2.address, 1, b"\x22" * 32, deadline, proof.signature))

    # (manager, treasury, modelUri, specSha256, rewardPerUnit, validatorFee, slashAmount, disputeWindow, bps,
    #  challengeWindow, contestQuorum); no spec, as the devnet's pools
    params = (addr["manager"], addr["treasury"], "hf://tiny-llama/arith", bytes(32), TOKEN // 100, TOKEN // 10)
    params += (200 * TOKEN, DISPUTE_WINDOW, 2_000, 0, 1)
    bench.record("createPool", bench.send("creator", pool.functions.createPool(params)))
    spec = Web3.keccak(text="bench pool spec")  # a spec pool stores one more word: its specSha256
    spec_params = (*params[:2], f"spec://{spec.hex().removeprefix('0x')}", spec, *params[4:])
    bench.record("createPool, spec pool", bench.send("creator", pool.functions.createPool(spec_params)))
    bench.record("fundPool", bench.send("creator", pool.functions.fundPool(1, 1_000_000 * TOKEN)))
    bench.record("startPool", bench.send("creator", pool.functions.startPool(1)))

    bench.record("approvePool", bench.send("provider", pool.functions.approvePool(1, 1_000 * TOKEN)))
    bench.send("provider2", pool.functions.approvePool(1, 1_000 * TOKEN))
    manager = Account.from_key(ANVIL_KEYS[3])
    expiry = bench.w3.eth.get_block("latest")["timestamp"] + 3600
    for nonce, (who, member) in enumerate((("provider", node), ("provider2", node2))):
        invite = sign_invite(manager, 1, member.address, nonce, expiry, chain_id, bench.book.compute_pool)
        gas = bench.send(who, pool.functions.joinPool(1, member.address, nonce, expiry, invite.signature))
        if who == "provider":
            bench.record("joinPool", gas)

    total = sum(BATCHES)
    submit_gas = [
        bench.send("node", pool.functions.submitWork(1, node.address, _work_key(i), FILE_UNITS, 1))
        for i in range(total)
    ]
    bench.record("submitWork", max(submit_gas))
    single = {"submitWork": sum(submit_gas) // len(submit_gas)}

    start = 0
    for size in BATCHES:
        keys = [_work_key(i) for i in range(start, start + size)]
        gas = bench.send("validator", pool.functions.attestWork(1, keys, NO_EVIDENCE))
        bench.record("attestWork", gas, size)
        single["attestWork"] = gas // size  # the last, largest batch
        start += size

    bad_key = Web3.keccak(text="forged-rollout")
    bench.send("node2", pool.functions.submitWork(1, node2.address, bad_key, 4096, 1))
    reason = b"toploc_mismatch".ljust(32, b"\x00")
    bench.record(
        "invalidateWork", bench.send("validator", pool.functions.invalidateWork(1, bad_key, reason, NO_EVIDENCE))
    )

    bench.increase_time(DISPUTE_WINDOW)
    start = 0
    for size in BATCHES:
        keys = [_work_key(i) for i in range(start, start + size)]
        gas = bench.send("anyone", pool.functions.finalizeWork(1, keys))
        bench.record("finalizeWork", gas, size)
        single["finalizeWork"] = gas // size
        start += size

    bench.record("withdrawRewards", bench.send("provider", pool.functions.withdrawRewards()))
    manifest = Web3.keccak(text="manifest-1")
    gas = bench.send("manager", pool.functions.publishCheckpoint(1, 1, manifest, "s3://ckpt/1/manifest.json"))
    bench.record("publishCheckpoint", gas)
    bench.record("unbond", bench.send("provider2", stake.functions.unbond(100 * TOKEN)))
    _challenged_verdicts(bench, node, manager)
    _bundles(bench, node, manager, single)


def _challenged_verdicts(bench: Bench, node: LocalAccount, manager: LocalAccount) -> None:
    """A pool with a challenge window: a rejection that waits, one overturned by a contest, one
    executed after the window; then the pool closes, refunds its budget and expires unjudged work."""
    pool = bench.contract("ComputePool")
    addr = {name: sender.address for name, sender in bench.senders.items()}
    params = (addr["manager"], addr["treasury"], "hf://tiny-llama/arith", bytes(32), TOKEN // 100, TOKEN // 10)
    params += (200 * TOKEN, DISPUTE_WINDOW, 2_000, CHALLENGE_WINDOW, 1)
    bench.send("creator", pool.functions.createPool(params))
    pool_id = int(pool.functions.poolCount().call())
    bench.send("creator", pool.functions.startPool(pool_id))
    bench.send("provider", pool.functions.approvePool(pool_id, 1_000 * TOKEN))
    expiry = bench.w3.eth.get_block("latest")["timestamp"] + 3600
    chain_id = bench.w3.eth.chain_id
    invite = sign_invite(manager, pool_id, node.address, 100, expiry, chain_id, bench.book.compute_pool)
    bench.send("provider", pool.functions.joinPool(pool_id, node.address, 100, expiry, invite.signature))
    contested, executed, unjudged = (Web3.keccak(text=t) for t in ("contested", "executed", "unjudged"))
    for key in (contested, executed, unjudged):
        bench.send("node", pool.functions.submitWork(pool_id, node.address, key, 4096, 1))
    reason = b"made_up".ljust(32, b"\x00")
    gas = bench.send("validator", pool.functions.invalidateWork(pool_id, contested, reason, NO_EVIDENCE))
    bench.record("invalidateWork (challenge window)", gas)
    gas = bench.send("validator2", pool.functions.contestRejection(pool_id, contested, NO_EVIDENCE))
    bench.record("contestRejection (overturns)", gas)
    bench.send("validator2", pool.functions.invalidateWork(pool_id, executed, reason, NO_EVIDENCE))
    bench.increase_time(CHALLENGE_WINDOW)
    bench.record("executeRejection", bench.send("anyone", pool.functions.executeRejection(pool_id, executed)))

    bench.send("creator", pool.functions.fundPool(pool_id, 1_000 * TOKEN))
    bench.record("closePool", bench.send("creator", pool.functions.closePool(pool_id)))
    bench.increase_time(DISPUTE_WINDOW)
    bench.record("refundBudget", bench.send("creator", pool.functions.refundBudget(pool_id)))
    bench.record("expireWork, batch 1", bench.send("anyone", pool.functions.expireWork(pool_id, [unjudged])))


def _bundle(label: str, files: int) -> tuple[list[bytes], list[int]]:
    """`files` canonical files (ascending sha256 keys) of FILE_UNITS units each."""
    return canonical((hashlib.sha256(f"{label}-{i}".encode()).digest(), FILE_UNITS) for i in range(files))


def _bundles(bench: Bench, node: LocalAccount, manager: LocalAccount, single: dict[str, int]) -> None:
    """Bundled submissions in a pool of their own: the submission at every size, attestWork and
    finalizeWork of 1 and 16 bundles of BUNDLE_FILES files, and the gas per accepted file compared
    with single-file submissions (`single`: submitWork's mean, attest and finalize per key at the
    largest batch). validator2 attests: `validator` lost stake to the overturned rejection above."""
    pool = bench.contract("ComputePool")
    addr = {name: sender.address for name, sender in bench.senders.items()}
    params = (addr["manager"], addr["treasury"], "hf://tiny-llama/arith", bytes(32), TOKEN // 100, TOKEN // 10)
    params += (200 * TOKEN, DISPUTE_WINDOW, 2_000, 0, 1)
    bench.send("creator", pool.functions.createPool(params))
    pool_id = int(pool.functions.poolCount().call())
    bench.send("creator", pool.functions.fundPool(pool_id, 100_000 * TOKEN))
    bench.send("creator", pool.functions.startPool(pool_id))
    bench.send("provider", pool.functions.approvePool(pool_id, 1_000 * TOKEN))
    expiry = bench.w3.eth.get_block("latest")["timestamp"] + 3600
    invite = sign_invite(manager, pool_id, node.address, 200, expiry, bench.w3.eth.chain_id, bench.book.compute_pool)
    bench.send("provider", pool.functions.joinPool(pool_id, node.address, 200, expiry, invite.signature))

    def submit(label: str, files: int) -> tuple[bytes, int]:
        keys, units = _bundle(label, files)
        gas = bench.send("node", pool.functions.submitWorkBundle(pool_id, node.address, keys, units, 1))
        return bundle_key(keys, units), gas

    submitted: dict[int, int] = {}
    for files in BUNDLE_SIZES:
        _, gas = submit(f"size-{files}", files)
        submitted[files] = gas
        bench.row({"op": "submitWorkBundle", "files": files, "gas": gas, "gas_per_file": gas // files})
    batches = {size: [submit(f"batch-{size}-{i}", BUNDLE_FILES)[0] for i in range(size)] for size in BUNDLE_BATCHES}

    attested: dict[int, int] = {}
    for size, keys in batches.items():
        attested[size] = bench.send("validator2", pool.functions.attestWork(pool_id, keys, NO_EVIDENCE))
        per_file = attested[size] // (size * BUNDLE_FILES)
        bench.row({"op": "attestWork, bundles", "files": BUNDLE_FILES, "batch": size, "gas": attested[size],
                   "gas_per_key": attested[size] // size, "gas_per_file": per_file})  # fmt: skip
    bench.increase_time(DISPUTE_WINDOW)
    finalized: dict[int, int] = {}
    for size, keys in batches.items():
        finalized[size] = bench.send("anyone", pool.functions.finalizeWork(pool_id, keys))
        per_file = finalized[size] // (size * BUNDLE_FILES)
        bench.row({"op": "finalizeWork, bundles", "files": BUNDLE_FILES, "batch": size, "gas": finalized[size],
                   "gas_per_key": finalized[size] // size, "gas_per_file": per_file})  # fmt: skip

    single_per_file = single["submitWork"] + single["attestWork"] + single["finalizeWork"]
    bench.row({"op": "per accepted file, single files", "gas_per_file": single_per_file,
               "submit": single["submitWork"], "attest": single["attestWork"], "finalize": single["finalizeWork"],
               "verdict_batch": BATCHES[-1]})  # fmt: skip
    for size in BUNDLE_BATCHES:
        settle = (attested[size] + finalized[size]) / size
        per_file = round((submitted[BUNDLE_FILES] + settle) / BUNDLE_FILES)
        bench.row({"op": "per accepted file, bundles", "files": BUNDLE_FILES, "verdict_batch": size,
                   "gas_per_file": per_file, "vs_single_files": round(single_per_file / per_file, 1),
                   "target": PER_FILE_TARGET, "meets_target": per_file <= PER_FILE_TARGET})  # fmt: skip


def main() -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()  # --help, nothing else
    with start_anvil() as anvil:
        w3 = connect(anvil.url)
        names = ("admin", "provider", "provider2", "manager", "creator", "validator", "anyone", "validator2")
        senders = {name: TxSender(w3, Account.from_key(ANVIL_KEYS[i])) for i, name in enumerate(names)}
        node, node2 = (Account.from_key(Web3.keccak(text=f"bench-node-{i}")) for i in range(2))
        senders["node"], senders["node2"] = TxSender(w3, node), TxSender(w3, node2)
        senders["treasury"] = TxSender(w3, Account.from_key(Web3.keccak(text="bench-treasury")))
        for account in (node, node2):
            senders["admin"].transfer_eth(account.address, 10 * 10**18)
        book = deploy_contracts(w3, senders["admin"], DeployParams())
        for validator in ("validator", "validator2"):  # staked from the devnet faucet
            grant_validator(w3, senders["admin"], book, senders[validator].address)
        bench = Bench(w3=w3, book=book, senders=senders, rows=[])
        run(bench, node, node2)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text("".join(json.dumps(row) + "\n" for row in bench.rows))
    missed = [row for row in bench.rows if row.get("meets_target") is False]
    for row in missed:
        print(f"target missed: {row}", file=sys.stderr)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())

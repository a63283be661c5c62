"""The pure halves of the one-submission audits (`proofpool.backend.audit`): the rows a submission's
logs make through the indexer's own projectors, the comparison with the ledger's rows (a tampered,
a missing and an invented row each fail their check with a reason), which transaction carries each
verdict's commitment, the attestation batch hash, and the explorer's view of a verdict's evidence."""

from __future__ import annotations

import copy
import hashlib
from datetime import UTC, datetime
from typing import Any

import pytest
from eth_abi import encode as abi_encode
from proofpool.backend.audit.chain_view import ChainView, Transaction
from proofpool.backend.audit.evidence_documents import Document, disagreements, parse_document
from proofpool.backend.audit.ledger_replay import UnknownStatement, replay_work
from proofpool.backend.audit.submission_diff import (
    CHECK_NAMES,
    check_chain_tip,
    check_contract_status,
    diff_submission,
)
from proofpool.backend.audit.verdict_evidence import _Finding
from proofpool.backend.audit.verdict_targets import Target, verdict_targets
from proofpool.backend.indexer.projections import PROJECTORS
from proofpool.backend.indexer.records import IndexedEvent
from proofpool.explorer.evidence_view import MAX_VALUE_CHARS, evidence_view

from proofpool.core.evidence import batch_evidence_sha256
from proofpool.core.ledger_listings import REWARDS, SLASHES, SUBMISSIONS, VERDICTS
from proofpool.infra.chain.artifacts import load_artifact
from proofpool.infra.chain.bindings import reason_code
from proofpool.infra.chain.deploy import AddressBook

POOL = 7
KEY = "0x" + hashlib.sha256(b"a rollout file").hexdigest()
NODE = "0x" + "11" * 20
PROVIDER = "0x" + "22" * 20
VALIDATOR = "0x" + "33" * 20
CONTESTER = "0x" + "44" * 20
TREASURY = "0x" + "55" * 20
POOL_ADDRESS = "0x" + "66" * 20


def tx(block: int) -> bytes:
    return hashlib.sha256(f"tx of block {block}".encode()).digest()


def event(name: str, block: int, log: int = 0, **args: Any) -> IndexedEvent:
    """A log of the ComputePool about (POOL, KEY), one transaction per block."""
    return IndexedEvent(
        block_number=block,
        block_hash=hashlib.sha256(f"block {block}".encode()).digest(),
        tx_hash=tx(block),
        log_index=log,
        contract="ComputePool",
        address=POOL_ADDRESS,
        name=name,
        args={"poolId": POOL, "workKey": KEY, **args},
        block_time=datetime.fromtimestamp(1_700_000_000 + 12 * block, UTC),
    )


def reason(text: str) -> str:
    return "0x" + reason_code(text).hex()


def submitted(block: int = 10) -> IndexedEvent:
    return event("WorkSubmitted", block, node=NODE, provider=PROVIDER, workUnits=512, modelVersion=3)


def accepted_and_paid() -> list[IndexedEvent]:
    """Submitted, attested, finalized: a submission, a verdict and two credits."""
    return [
        submitted(),
        event("WorkAttested", 12, 1, validator=VALIDATOR),
        event("WorkFinalized", 20, 2, node=NODE, provider=PROVIDER, reward=5120, validator=VALIDATOR, validatorFee=50),
    ]


def invalidated() -> list[IndexedEvent]:
    """Submitted, rejected and invalidated in one transaction (no challenge window), slashed."""
    return [
        submitted(),
        event("WorkRejected", 12, 1, validator=VALIDATOR, reason=reason("sampling_mismatch"),
              evidenceHash="0x" + "ab" * 32, executableAt=0),
        event("WorkInvalidated", 12, 2, node=NODE, validator=VALIDATOR, reason=reason("sampling_mismatch")),
        event("SlashDistributed", 12, 5, provider=PROVIDER, validator=VALIDATOR, validatorShare=25,
              treasury=TREASURY, treasuryShare=25),
    ]  # fmt: skip


def ledger_of(events: list[IndexedEvent]) -> dict[str, Any]:
    """The ledger rows an honest indexer writes for `events`, in the API's shape."""
    work = replay_work(events)
    return {"submission": work.submission, "verdicts": work.verdicts, "slashes": work.slashes, "rewards": work.rewards}


def checks_of(events: list[IndexedEvent], ledger: dict[str, Any], contract: str | None = None) -> dict[str, Any]:
    status = contract or ledger["submission"]["status"]
    tip = check_chain_tip(100, b"\x01" * 32, b"\x01" * 32)
    return {c.name: c for c in diff_submission(replay_work(events), ledger, status, 100, tip)}


# --- the replay -----------------------------------------------------------------------------


def test_the_replay_makes_the_rows_the_indexer_writes_in_the_api_shape():
    work = replay_work(accepted_and_paid())
    assert work.submission == {
        "pool_id": POOL,
        "work_key": KEY,
        "node": NODE,
        "provider": PROVIDER,
        "work_units": 512,
        "model_version": 3,
        "status": "finalized",
        "submitted_at": datetime.fromtimestamp(1_700_000_120, UTC),
        "block_number": 10,
        "tx_hash": "0x" + tx(10).hex(),
        "log_index": 0,
        "status_block": 20,
        "status_tx_hash": "0x" + tx(20).hex(),
        "files": None,
    }
    assert work.status_logs == 2
    assert work.verdicts == [
        {"pool_id": POOL, "work_key": KEY, "verdict": "accepted", "validator": VALIDATOR, "reason": None,
         "block_number": 12, "tx_hash": "0x" + tx(12).hex(), "log_index": 1, "lag_blocks": 2}
    ]  # fmt: skip
    assert [(r["kind"], r["account"], r["amount"]) for r in work.rewards] == [
        ("provider_reward", PROVIDER, "5120"),
        ("validator_fee", VALIDATOR, "50"),
    ]


def test_the_replay_fills_every_column_the_ledger_serves():
    rejected = [*invalidated(), event("ValidatorSlashed", 30, validator=VALIDATOR, beneficiary=CONTESTER, amount=9)]
    work = replay_work(rejected)
    assert work.submission is not None and set(work.submission) == {c.name for c in SUBMISSIONS.columns}
    for rows, listing in ((work.verdicts, VERDICTS), (work.slashes, SLASHES), (work.rewards, REWARDS)):
        assert rows and all(set(row) == {c.name for c in listing.columns} for row in rows), listing.name


def test_a_bundle_keeps_its_files_in_bundle_order():
    files = ["0x" + "02" * 32, "0x" + "01" * 32]
    bundle = event("WorkBundleSubmitted", 10, node=NODE, provider=PROVIDER, workUnits=9, modelVersion=1,
                   fileKeys=files, fileUnits=[4, 5])  # fmt: skip
    assert replay_work([bundle]).submission["files"] == [  # type: ignore[index]
        {"work_key": files[0], "work_units": 4},
        {"work_key": files[1], "work_units": 5},
    ]


WORK_EVENTS = {
    "WorkSubmitted": {"node": NODE, "provider": PROVIDER, "workUnits": 1, "modelVersion": 0},
    "WorkBundleSubmitted": {"node": NODE, "provider": PROVIDER, "workUnits": 1, "modelVersion": 0,
                            "fileKeys": ["0x" + "01" * 32], "fileUnits": [1]},
    "WorkAttested": {"validator": VALIDATOR},
    "WorkInvalidated": {"node": NODE, "validator": VALIDATOR, "reason": reason("x")},
    "WorkRejected": {"validator": VALIDATOR, "reason": reason("x"), "evidenceHash": "0x" + "00" * 32,
                     "executableAt": 1},
    "RejectionContested": {"validator": CONTESTER, "evidenceHash": "0x" + "00" * 32, "contests": 1},
    "RejectionOverturned": {"validator": VALIDATOR, "restored": 1},
    "ValidatorSlashed": {"validator": VALIDATOR, "beneficiary": CONTESTER, "amount": 1},
    "WorkFinalized": {"node": NODE, "provider": PROVIDER, "reward": 1, "validator": VALIDATOR, "validatorFee": 1},
    "WorkForfeited": {"node": NODE},
    "WorkExpired": {"node": NODE},
    "SlashDistributed": {"provider": PROVIDER, "validator": VALIDATOR, "validatorShare": 1, "treasury": TREASURY,
                         "treasuryShare": 1},
    "WorkSkipped": {"status": 2},
}  # fmt: skip
"""Every ComputePool event about one work key (checked against the ABI below), with arguments."""


def test_every_work_event_of_the_abi_is_replayed():
    abi = load_artifact("ComputePool").abi
    keyed = {
        e["name"]
        for e in abi
        if e.get("type") == "event" and [i["name"] for i in e["inputs"][:2]] == ["poolId", "workKey"]
    }
    assert keyed == set(WORK_EVENTS)
    for name, args in WORK_EVENTS.items():
        replay_work([submitted(1), event(name, 2, **args)])  # raises UnknownStatement if a projector outgrew it


def test_a_statement_the_replay_does_not_know_is_a_loud_bug(monkeypatch):
    monkeypatch.setitem(PROJECTORS, "WorkAttested", lambda cur, e: cur.execute("UPDATE pools SET x = 1", {}))
    with pytest.raises(UnknownStatement, match="UPDATE pools"):
        replay_work([submitted(), event("WorkAttested", 12, validator=VALIDATOR)])


# --- the comparison -------------------------------------------------------------------------


def test_an_honest_ledger_passes_every_check():
    for events in (accepted_and_paid(), invalidated()):
        checks = checks_of(events, ledger_of(events))
        assert list(checks) == list(CHECK_NAMES)
        assert all(c.ok for c in checks.values()), checks


def test_a_tampered_verdict_reason_fails_the_verdicts_check_naming_both_values():
    events = invalidated()
    ledger = ledger_of(events)
    ledger["verdicts"][0]["reason"] = "made_up"
    checks = checks_of(events, ledger)
    assert not checks["verdicts"].ok
    assert "reason is 'made_up' in the ledger, 'sampling_mismatch' on the chain" in checks["verdicts"].detail
    assert "1 of 1 differ" in checks["verdicts"].detail
    assert [name for name, c in checks.items() if not c.ok] == ["verdicts"]


def test_a_missing_verdict_row_fails_the_verdicts_check():
    events = accepted_and_paid()
    ledger = ledger_of(events)
    ledger["verdicts"] = []
    check = checks_of(events, ledger)["verdicts"]
    assert not check.ok
    assert (
        f"the accepted verdict of {VALIDATOR}" in check.detail
        and "on the chain but missing from the ledger" in check.detail
    )


def test_a_row_no_log_makes_and_a_changed_amount_fail_their_checks():
    events = invalidated()
    ledger = ledger_of(events)
    invented = {**ledger["slashes"][0], "tx_hash": "0x" + "99" * 32}
    ledger["slashes"].append(invented)
    ledger["rewards"][0]["amount"] = "26"
    checks = checks_of(events, ledger)
    assert not checks["slashes"].ok and "is in the ledger, but no log of the chain makes it" in checks["slashes"].detail
    assert not checks["credits"].ok and "amount is '26' in the ledger, '25' on the chain" in checks["credits"].detail


def test_a_status_the_logs_do_not_lead_to_fails_and_the_contract_is_asked_too():
    events = accepted_and_paid()
    ledger = ledger_of(events)
    tampered = copy.deepcopy(ledger)
    tampered["submission"]["status"] = "accepted"
    checks = checks_of(events, tampered, contract="finalized")
    assert (
        not checks["status"].ok
        and "status is 'accepted' in the ledger, 'finalized' on the chain" in checks["status"].detail
    )
    assert not checks["contract_status"].ok
    assert checks["contract_status"].detail == "getWork at block 100 says 'finalized', the ledger 'accepted'"
    assert check_contract_status("finalized", "finalized", 5).ok


def test_a_changed_submission_column_fails_the_submission_check():
    events = accepted_and_paid()
    ledger = ledger_of(events)
    ledger["submission"]["work_units"] = 600
    check = checks_of(events, ledger)["submission"]
    assert not check.ok and check.detail == "work_units is 600 in the ledger, 512 on the chain"
    missing = checks_of([], ledger_of(events))
    assert (
        not missing["submission"].ok and "no WorkSubmitted or WorkBundleSubmitted log" in missing["submission"].detail
    )


def test_the_chain_tip_must_be_the_block_the_ledger_indexed():
    assert check_chain_tip(9, None, b"\x01" * 32).ok
    assert check_chain_tip(9, b"\x01" * 32, b"\x01" * 32).ok
    fork = check_chain_tip(9, b"\x02" * 32, b"\x01" * 32)
    assert not fork.ok and "follows a fork" in fork.detail
    gone = check_chain_tip(9, b"\x01" * 32, None)
    assert not gone.ok and "does not have" in gone.detail


# --- where each verdict's commitment is -----------------------------------------------------


def row(verdict: str, block: int, log: int, validator: str = VALIDATOR, why: str | None = None) -> dict[str, Any]:
    return {"verdict": verdict, "validator": validator, "reason": why, "block_number": block,
            "tx_hash": "0x" + tx(block).hex(), "log_index": log}  # fmt: skip


def test_an_invalid_verdict_after_a_challenge_window_commits_in_its_rejection_and_others_are_listed():
    events = [
        submitted(),
        event("WorkRejected", 11, 0, validator=CONTESTER, reason=reason("made_up"), evidenceHash="0x", executableAt=1),
        event("RejectionContested", 12, 0, validator=VALIDATOR, evidenceHash="0x", contests=1),
        event("RejectionOverturned", 12, 1, validator=CONTESTER, restored=1),
        event("WorkAttested", 13, 0, validator=VALIDATOR),
        event("WorkRejected", 14, 0, validator=VALIDATOR, reason=reason("late"), evidenceHash="0x", executableAt=1),
        event("WorkInvalidated", 20, 3, node=NODE, validator=VALIDATOR, reason=reason("late")),
    ]
    verdicts = [row("accepted", 13, 0), row("invalid", 20, 3, why="late")]
    targets = verdict_targets(verdicts, events)
    assert [(t.verdict, t.validator, t.block_number) for t in targets] == [
        ("rejected", CONTESTER, 11),
        ("contest", VALIDATOR, 12),
        ("accepted", VALIDATOR, 13),
        ("invalid", VALIDATOR, 20),
    ]
    rejected, contest, attested, invalid = targets
    assert rejected.reason == "made_up" and rejected.commitment_tx == "0x" + tx(11).hex()
    assert contest.review_of_block == 11  # its document sits beside the rejection of block 11
    assert attested.commitment_tx == "0x" + tx(13).hex() and attested.review_of_block == 11
    assert invalid.commitment_tx == "0x" + tx(14).hex()  # executeRejection's calldata has no commitment


def test_an_invalid_verdict_without_its_rejection_on_the_chain_has_no_commitment():
    (target,) = verdict_targets([row("invalid", 20, 3, why="x")], [submitted()])
    assert target.commitment_tx is None and "no WorkRejected log" in (target.note or "")


def test_a_batch_commitment_hashes_its_documents_in_batch_order_with_zeros_for_none():
    one, three = hashlib.sha256(b"one").digest(), hashlib.sha256(b"three").digest()
    assert batch_evidence_sha256([one, None, three]) == hashlib.sha256(one + bytes(32) + three).digest()
    assert batch_evidence_sha256([three, None, one]) != batch_evidence_sha256([one, None, three])


def test_a_document_must_be_a_json_object_that_names_its_verdict():
    assert parse_document(b"{not json")[0] is None and "not JSON" in (parse_document(b"{not json")[1] or "")
    assert "not an object" in (parse_document(b"[1, 2]")[1] or "")
    target = Target("invalid", VALIDATOR, "sampling_mismatch", 12, "0x", 1, "0x")
    good = {"pool_id": POOL, "file_sha256": KEY[2:], "validator": VALIDATOR, "verdict": "invalid",
            "reason": "sampling_mismatch"}  # fmt: skip
    assert disagreements(good, POOL, KEY, target) == []
    assert disagreements({**good, "reason": "other"}, POOL, KEY, target) == [
        "its reason is 'other', the chain's 'sampling_mismatch'"
    ]


def test_verdict_calldata_is_decoded_only_from_the_compute_pool():
    book = AddressBook(1, "0x" + "01" * 20, "0x" + "02" * 20, "0x" + "03" * 20, POOL_ADDRESS, 0, "0x" + "04" * 20)
    view = ChainView.__new__(ChainView)  # the decoding needs no connection
    ChainView.__init__(view, None, book, "nowhere")  # type: ignore[arg-type]
    selector = next(s for s, f in view._functions.items() if f.name == "invalidateWork")
    data = selector + abi_encode(["uint256", "bytes32", "bytes32", "bytes32"], [POOL, bytes(32), b"r" * 32, b"e" * 32])
    call = view.decode_call(Transaction(POOL_ADDRESS, data))
    assert call is not None and call.function == "invalidateWork" and call.args["evidenceHash"] == b"e" * 32
    assert view.decode_call(Transaction("0x" + "77" * 20, data)) is None
    assert view.decode_call(Transaction(POOL_ADDRESS, b"\x00\x01\x02\x03" + data[4:])) is None
    assert view.decode_call(Transaction(POOL_ADDRESS, selector + b"\x00" * 3)) is None


# --- the explorer's view --------------------------------------------------------------------


def test_the_explorer_shows_a_documents_main_fields_and_caps_long_values():
    item = {
        "verdict": "invalid", "validator": VALIDATOR, "reason": "sampling_mismatch", "block_number": 12,
        "tx_hash": "0x" + tx(12).hex(), "log_index": 2, "commitment_tx_hash": "0x" + tx(12).hex(),
        "function": "invalidateWork", "commitment": "0x" + "ab" * 32, "batch_size": None,
        "document_key": "pools/7/evidence/x/y.json", "document_bytes": 300, "status": "matches", "matches": True,
        "agrees": True, "detail": "sha256 of the document is the commitment invalidateWork carries",
        "document": {"format": 1, "verdict": "invalid", "reason": "sampling_mismatch", "pool_id": POOL,
                     "evidence": {"row": 3, "recomputed": True, "rows": list(range(500))}},
    }  # fmt: skip
    view = evidence_view(item)
    assert view.ok and view.anchor == "evidence-12-2" and view.status_text.startswith("evidence matches")
    fields = {f.label: f.text for f in view.fields}
    assert list(fields)[:4] == ["verdict", "reason", "pool_id", "format"]
    assert fields["evidence.row"] == "3" and fields["evidence.recomputed"] == "yes"
    assert len(fields["evidence.rows"]) == MAX_VALUE_CHARS and fields["evidence.rows"].endswith("…")
    facts = {f.label: f for f in view.facts}
    assert facts["Commitment"].title == item["commitment"] and facts["Hashes to the commitment"].text == "yes"
    missing = evidence_view({**item, "status": "missing", "document": None, "matches": None})
    assert not missing.ok and missing.fields == [] and missing.document_json is None


@pytest.mark.parametrize(
    "commitment, document, matches, status",
    [
        (None, None, None, "no_commitment"),
        (b"c" * 32, Document("k", problem="missing"), None, "missing"),
        (b"c" * 32, Document("k", problem="too_large"), None, "unreadable"),
        (b"c" * 32, Document("k", b"{}", 2), False, "mismatch"),
        (b"c" * 32, Document("k", b"[not json", 9), True, "unreadable"),  # committed to, but not a document
        (b"c" * 32, Document("k", b"{}", 2), None, "unreadable"),  # a batch too large to recompute
        (b"c" * 32, Document("k", b"{}", 2), True, "matches"),
    ],
)
def test_each_evidence_status(commitment, document, matches, status):
    target = Target("accepted", VALIDATOR, None, 12, "0x", 1, "0x")
    found = _Finding(target, "attestWork", commitment, 1, document, None, matches).result(POOL, KEY)
    assert found.status == status
    assert found.matches is matches

"""The checks of one ledger submission against the chain (`/v1/ledger/submissions/{pool}/{key}/verify`
and `/evidence`) and the explorer's submission page over them, on a real anvil, PostgreSQL,
SeaweedFS and backend.

The market: a pool with a challenge window and a contest quorum of one, alice's and bob's nodes, two
validators who store evidence documents (`proofpool.validator.evidence`) before each verdict, as the
validator service does. Alice's two files are attested in one batch and one is finalized; one is
attested without evidence; bob's file is rejected and, after the window, invalidated (slashed); one
of alice's files is rejected, contested and overturned, then attested by the contester on its
contest's document; one waits in its challenge window. The indexer indexes it all.
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from eth_account.signers.local import LocalAccount
from fastapi.testclient import TestClient
from proofpool.backend.audit.chain_view import OUTAGE_MEMORY
from proofpool.backend.audit.submission_diff import CHECK_NAMES
from proofpool.devnet.market import Cast, devnet_pool_params, onboard_node, open_market, time_travel
from proofpool.explorer.app import mount_explorer
from proofpool.validator.evidence import evidence_document, publish_evidence

from proofpool.core.evidence import batch_evidence_sha256
from proofpool.infra.chain.anvil import start_anvil
from proofpool.infra.chain.bindings import NO_EVIDENCE
from proofpool.infra.chain.client import ChainClient
from proofpool.infra.chain.deploy import AddressBook, deploy_contracts, grant_validator, write_address_book
from proofpool.infra.chain.rpc import connect
from proofpool.infra.chain.signing import sign_invite
from proofpool.infra.chain.tx import TxSender
from proofpool.infra.chain.units import TOKEN
from proofpool.infra.config import Settings, get_settings
from proofpool.infra.storage import ObjectStore, evidence_key
from proofpool.infra.storage.seaweed import SeaweedProcess
from tests.fixtures.explorer_markup import parse_page
from tests.fixtures.indexer import make_indexer
from tests.fixtures.postgres import migrated_database

pytestmark = pytest.mark.timeout(300)

WINDOW = 600
DISPUTE = 3600
AUDIT_REDIS_DB = 4
PREFIX = "/explorer"
KEYS = ("ok1", "ok2", "nodoc", "bad", "over", "wait")


@dataclass
class AuditedMarket:
    client: TestClient
    settings: Settings
    book: AddressBook
    pool_id: int
    keys: dict[str, str]
    """0x-hex work key of each file by name."""
    store: ObjectStore
    cast: Cast
    database_url: str

    def key_bytes(self, name: str) -> bytes:
        return bytes.fromhex(self.keys[name][2:])

    def verify(self, name: str) -> dict[str, Any]:
        reply = self.client.get(f"/v1/ledger/submissions/{self.pool_id}/{self.keys[name]}/verify")
        assert reply.status_code == 200, reply.text
        return reply.json()

    def evidence(self, name: str) -> list[dict[str, Any]]:
        reply = self.client.get(f"/v1/ledger/submissions/{self.pool_id}/{self.keys[name]}/evidence")
        assert reply.status_code == 200, reply.text
        return reply.json()["verdicts"]

    def sql(self, statement: str, params: tuple[Any, ...]) -> int:
        with psycopg.connect(self.database_url, autocommit=True) as conn:
            return conn.execute(statement, params).rowcount


def failed(result: dict[str, Any]) -> dict[str, str]:
    return {c["name"]: c["detail"] for c in result["checks"] if not c["ok"]}


class Judge:
    """A validator that stores its evidence before each verdict, as the validator service does."""

    def __init__(self, client: ChainClient, account: LocalAccount, store: ObjectStore, pool_id: int) -> None:
        self.me, self.address, self.store, self.pool_id = client.as_account(account), account.address, store, pool_id

    def document(self, key: bytes, verdict: str, reason: str | None, review_of_block: int | None = None) -> bytes:
        evidence = {"rows": [0, 1, 2], "checked_rows": 3, "recomputed": True, "row": None if reason is None else 1}
        document = evidence_document(self.pool_id, key, self.address, verdict, reason, evidence)
        return publish_evidence(self.store, self.pool_id, key, self.address, document, review_of_block=review_of_block)

    def attest(self, keys: list[bytes]) -> None:
        hashes = [self.document(k, "accepted", None) for k in keys]
        self.me.pool.attest_work(self.pool_id, keys, batch_evidence_sha256(hashes))

    def reject(self, key: bytes, reason: str) -> int:
        """invalidateWork; returns the rejection's block."""
        receipt = self.me.pool.invalidate_work(self.pool_id, key, reason, self.document(key, "invalid", reason))
        return int(receipt["blockNumber"])

    def contest(self, key: bytes, rejected_block: int) -> bytes:
        digest = self.document(key, "contest", None, review_of_block=rejected_block)
        self.me.pool.contest_rejection(self.pool_id, key, digest)
        return digest


def build_market(url: str, store: ObjectStore) -> tuple[Any, AddressBook, int, dict[str, bytes], Cast]:
    """The chain of the module docstring, on `url`'s anvil; evidence in `store`."""
    cast = Cast()
    w3 = connect(url)
    book = deploy_contracts(w3, TxSender(w3, cast.admin))
    admin = ChainClient.build(w3, book, cast.admin)
    params = dataclasses.replace(devnet_pool_params(cast, DISPUTE), challenge_window=WINDOW, contest_quorum=1)
    pool_id = open_market(admin, cast, params)
    for provider, node in ((cast.alice, cast.alice_node), (cast.bob, cast.bob_node)):
        me = onboard_node(admin, provider, node, 200 * TOKEN, 4, pools=(pool_id,))
        expiry = w3.eth.get_block("latest")["timestamp"] + 3600
        me.pool.join_pool(
            sign_invite(cast.manager, pool_id, node.address, 1, expiry, w3.eth.chain_id, book.compute_pool)
        )
    grant_validator(w3, TxSender(w3, cast.admin), book, cast.validator2.address)
    run = uuid.uuid4().hex
    keys = {name: bytes.fromhex(uuid.uuid5(uuid.NAMESPACE_OID, f"{run}-{name}").hex * 2) for name in KEYS}
    alice, bob = admin.as_account(cast.alice_node), admin.as_account(cast.bob_node)
    for name, key in keys.items():
        node = bob if name == "bad" else alice
        node.pool.submit_work(pool_id, (cast.bob_node if name == "bad" else cast.alice_node).address, key, 16, 0)
    validator, contester = Judge(admin, cast.validator, store, pool_id), Judge(admin, cast.validator2, store, pool_id)

    validator.attest([keys["ok1"], keys["ok2"]])
    validator.me.pool.attest_work(pool_id, [keys["nodoc"]], NO_EVIDENCE)
    validator.reject(keys["bad"], "sampling_mismatch")
    rejected = validator.reject(keys["over"], "made_up")
    validator.reject(keys["wait"], "made_up")  # nobody executes it: it stays rejected
    # Quorum 1: the contest overturns the rejection at once (back to pending; the validator is slashed).
    digest = contester.contest(keys["over"], rejected)
    contester.me.pool.attest_work(pool_id, [keys["over"]], digest)  # as validator.verdicts does after a contest
    time_travel(admin, max(WINDOW, DISPUTE) + 1)
    admin.pool.execute_rejection(pool_id, keys["bad"])
    admin.pool.finalize_work(pool_id, [keys["ok1"]])
    return w3, book, pool_id, keys, cast


@pytest.fixture(scope="module")
def audited(seaweed: SeaweedProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuditedMarket]:
    settings = seaweed.settings(get_settings()).model_copy(update={"s3_bucket": f"audit-{uuid.uuid4().hex[:12]}"})
    store = ObjectStore.from_settings(settings)
    store.ensure_bucket()
    deployments = tmp_path_factory.mktemp("audit-deployments")
    with start_anvil() as anvil, migrated_database("proofpool_test_audit") as url:
        w3, book, pool_id, keys, cast = build_market(anvil.url, store)
        write_address_book(book, deployments)
        make_indexer(w3, book, url, batch_blocks=50).run(once=True)
        redis_url = get_settings().redis_url.rsplit("/", 1)[0] + f"/{AUDIT_REDIS_DB}"
        app_settings = settings.model_copy(
            update={"database_url": url, "redis_url": redis_url, "rpc_url": anvil.url, "deployments_dir": deployments}
        )
        from proofpool.backend.app import create_app

        backend = create_app(app_settings)
        mount_explorer(backend, PREFIX)
        with TestClient(backend, raise_server_exceptions=False) as client:
            yield AuditedMarket(
                client, app_settings, book, pool_id, {n: "0x" + k.hex() for n, k in keys.items()}, store, cast, url
            )


# --- /verify ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", KEYS)
def test_every_honestly_indexed_submission_verifies(audited, name):
    started = time.monotonic()
    result = audited.verify(name)
    elapsed = time.monotonic() - started
    assert result["ok"], failed(result)
    assert [c["name"] for c in result["checks"]] == list(CHECK_NAMES)
    assert result["from_block"] == audited.book.deploy_block and result["to_block"] > result["from_block"]
    assert result["logs"] >= 1 and result["chain_id"] == audited.book.chain_id
    assert elapsed < 1.0, elapsed  # one request's worth


def test_the_verification_reads_what_the_ledger_says_of_the_slashed_file(audited):
    result = audited.verify("bad")
    checks = {c["name"]: c["detail"] for c in result["checks"]}
    assert checks["contract_status"].endswith("says 'invalid', as the ledger does")
    assert checks["slashes"] == "1 on the chain, each in the ledger with the same values"
    assert result["logs"] >= 4  # submitted, rejected, invalidated, slash distributed (and the slash credit's log)


def test_a_tampered_verdict_reason_fails_the_verdicts_check(audited):
    key = audited.key_bytes("bad")
    assert audited.sql("UPDATE verdicts SET reason = 'made_up' WHERE work_key = %s", (key,)) == 1
    try:
        result = audited.verify("bad")
    finally:
        audited.sql("UPDATE verdicts SET reason = 'sampling_mismatch' WHERE work_key = %s", (key,))
    assert not result["ok"]
    problems = failed(result)
    assert list(problems) == ["verdicts"]
    assert "reason is 'made_up' in the ledger, 'sampling_mismatch' on the chain" in problems["verdicts"]
    assert audited.verify("bad")["ok"]


def test_a_deleted_verdict_row_and_a_tampered_status_fail_their_checks(audited):
    key = audited.key_bytes("ok1")
    with psycopg.connect(audited.database_url, autocommit=True) as conn:
        (saved,) = conn.execute("SELECT * FROM verdicts WHERE work_key = %s", (key,)).fetchall()
        columns = [d.name for d in conn.execute("SELECT * FROM verdicts LIMIT 0").description]
        conn.execute("DELETE FROM verdicts WHERE work_key = %s", (key,))
        conn.execute("UPDATE submissions SET status = 'accepted' WHERE work_key = %s", (key,))
    try:
        result = audited.verify("ok1")
    finally:
        with psycopg.connect(audited.database_url, autocommit=True) as conn:
            marks = ", ".join(["%s"] * len(columns))
            conn.execute(f"INSERT INTO verdicts ({', '.join(columns)}) VALUES ({marks})", saved)
            conn.execute("UPDATE submissions SET status = 'finalized' WHERE work_key = %s", (key,))
    problems = failed(result)
    assert set(problems) == {"verdicts", "status", "contract_status"}
    assert "on the chain but missing from the ledger" in problems["verdicts"]
    assert "status is 'accepted' in the ledger, 'finalized' on the chain" in problems["status"]
    assert "says 'finalized', the ledger 'accepted'" in problems["contract_status"]
    assert audited.verify("ok1")["ok"]


def test_an_unknown_submission_is_404_and_a_malformed_key_422(audited):
    reply = audited.client.get(f"/v1/ledger/submissions/{audited.pool_id}/0x{'00' * 32}/verify")
    assert reply.status_code == 404 and reply.json()["error"] == "submission_not_found"
    reply = audited.client.get(f"/v1/ledger/submissions/{audited.pool_id}/0x{'00' * 32}/evidence")
    assert reply.status_code == 404 and reply.json()["error"] == "submission_not_found"
    reply = audited.client.get(f"/v1/ledger/submissions/{audited.pool_id}/0x12/verify")
    assert reply.status_code == 422 and reply.json()["error"] == "invalid_request"


# --- /evidence --------------------------------------------------------------------------------


def by_verdict(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {item["verdict"]: item for item in items}


def test_an_invalid_verdicts_evidence_matches_the_commitment_of_its_rejection(audited):
    (item,) = audited.evidence("bad")
    assert (item["verdict"], item["reason"], item["validator"]) == (
        "invalid",
        "sampling_mismatch",
        audited.cast.validator.address,
    )
    assert item["status"] == "matches" and item["matches"] is True and item["agrees"] is True, item
    assert item["function"] == "invalidateWork" and item["commitment_tx_hash"] != item["tx_hash"]  # executed later
    assert item["document"]["verdict"] == "invalid" and item["document"]["file_sha256"] == audited.keys["bad"][2:]
    assert item["document_key"] == evidence_key(audited.pool_id, audited.keys["bad"], audited.cast.validator.address)


def test_a_batch_attestations_evidence_is_recomputed_from_the_batch(audited):
    (item,) = audited.evidence("ok2")
    assert item["status"] == "matches" and item["function"] == "attestWork" and item["batch_size"] == 2, item
    assert "the batch's 2 documents" in item["detail"]


def test_the_challenge_game_is_told_rejection_contest_and_attestation_on_the_contest_document(audited):
    items = audited.evidence("over")
    assert [i["verdict"] for i in items] == ["rejected", "contest", "accepted"]
    assert all(i["status"] == "matches" and i["agrees"] for i in items), items
    rejected, contest, accepted = items
    assert rejected["reason"] == "made_up" and rejected["validator"] == audited.cast.validator.address
    assert contest["validator"] == accepted["validator"] == audited.cast.validator2.address
    assert ".review-" in contest["document_key"] and accepted["document_key"] == contest["document_key"]
    (waiting,) = audited.evidence("wait")
    assert (waiting["verdict"], waiting["status"]) == ("rejected", "matches")


def test_a_verdict_without_evidence_has_no_commitment(audited):
    (item,) = audited.evidence("nodoc")
    assert item["status"] == "no_commitment" and item["commitment"] is None and item["matches"] is None
    assert "zero hash" in item["detail"]


def test_a_deleted_document_is_missing_and_a_garbled_one_unreadable_or_mismatched(audited):
    key = evidence_key(audited.pool_id, audited.keys["bad"], audited.cast.validator.address)
    original = audited.store.get_object(key)
    try:
        audited.store.delete(key)
        (item,) = audited.evidence("bad")
        assert item["status"] == "missing" and item["document"] is None and item["matches"] is None, item
        assert key in item["detail"]
        shown = audited.client.get(f"{PREFIX}/submissions/{audited.pool_id}/{audited.keys['bad']}").text
        assert 'data-status="missing"' in shown and "evidence document missing from the object store" in shown
        audited.store.put_object(key, b"{not json")
        (item,) = audited.evidence("bad")
        assert item["status"] == "mismatch" and item["matches"] is False and item["document"] is None, item
    finally:
        audited.store.put_object(key, original)
    assert audited.evidence("bad")[0]["status"] == "matches"


# --- an unreachable chain ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def chainless(audited: AuditedMarket) -> Iterator[TestClient]:
    """The same backend and explorer with the JSON-RPC node at a port nobody listens on."""
    from proofpool.backend.app import create_app

    backend = create_app(audited.settings.model_copy(update={"rpc_url": "http://127.0.0.1:9"}))
    mount_explorer(backend, PREFIX)
    with TestClient(backend, raise_server_exceptions=False) as client:
        yield client


def test_an_unreachable_chain_is_a_503_that_says_so_and_is_not_waited_out_twice(audited, chainless):
    path = f"/v1/ledger/submissions/{audited.pool_id}/{audited.keys['bad']}"
    first = chainless.get(f"{path}/verify")
    assert first.status_code == 503, first.text
    assert first.json()["error"] == "service_unavailable" and "http://127.0.0.1:9" in first.json()["detail"]
    started = time.monotonic()
    again = chainless.get(f"{path}/evidence")
    assert again.status_code == 503 and "not retried for" in again.json()["detail"]
    assert time.monotonic() - started < OUTAGE_MEMORY / 2


# --- the explorer's submission page -----------------------------------------------------------


def test_the_submission_page_shows_each_verdicts_evidence(audited):
    reply = audited.client.get(f"{PREFIX}/submissions/{audited.pool_id}/{audited.keys['over']}")
    assert reply.status_code == 200
    html = reply.text
    assert html.count('class="evidence"') == 3 and html.count('data-status="matches"') == 3
    assert "evidence matches the on-chain commitment" in html and "the evidence is not in" not in html
    assert 'action="/explorer/submissions/' in html and "Verify against the chain" in html


def test_the_verify_button_answers_the_page_with_each_check(audited):
    url = f"{PREFIX}/submissions/{audited.pool_id}/{audited.keys['bad']}/verify"
    reply = audited.client.post(url)
    assert reply.status_code == 200, reply.text[:500]
    page = parse_page(reply.text)
    assert [(r["name"], r["ok"]) for r in page.tables["checks"]] == [
        (name, "true")
        for name in ("chain_tip", "submission", "status", "contract_status", "verdicts", "slashes", "credits")
    ]
    assert 'data-verified="ok"' in reply.text and f"blocks {audited.book.deploy_block} to " in reply.text
    assert page.tables["verdicts"] and page.records["submission"]["status"] == "invalid"
    download = audited.client.get(url, params={"format": "csv", "table": "verdicts"})  # the page's CSV link
    assert download.status_code == 200 and download.text.startswith("verdict,reason,validator")


def test_the_verify_button_shows_a_mismatch(audited):
    key = audited.key_bytes("bad")
    audited.sql("UPDATE verdicts SET reason = 'made_up' WHERE work_key = %s", (key,))
    try:
        reply = audited.client.post(f"{PREFIX}/submissions/{audited.pool_id}/{audited.keys['bad']}/verify")
    finally:
        audited.sql("UPDATE verdicts SET reason = 'sampling_mismatch' WHERE work_key = %s", (key,))
    page = parse_page(reply.text)
    assert reply.status_code == 200 and 'data-verified="failed"' in reply.text
    assert {r["name"]: r["ok"] for r in page.tables["checks"]}["verdicts"] == "false"


def test_a_chain_outage_is_a_message_on_the_page_not_a_500(audited, chainless):
    path = f"{PREFIX}/submissions/{audited.pool_id}/{audited.keys['bad']}"
    reply = chainless.post(f"{path}/verify")
    assert reply.status_code == 503
    page = parse_page(reply.text)
    assert "service_unavailable" in page.errors and "could not be verified" in reply.text
    assert page.records["submission"]["status"] == "invalid"  # the rest of the page is there
    shown = chainless.get(path)
    assert shown.status_code == 200 and "The evidence could not be checked" in shown.text


# --- in a real browser --------------------------------------------------------------------------


PHONE = {"width": 390, "height": 844}


@pytest.mark.parametrize("viewport", [pytest.param(None, id="desktop"), pytest.param(PHONE, id="phone")])
def test_in_a_browser_the_evidence_and_the_verify_button_are_accessible(
    audited, browser, page_errors, screenshot, viewport
):
    from proofpool.backend.app import create_app

    from proofpool.infra.chain.anvil import free_port
    from tests.fixtures.backend import serve_app
    from tests.fixtures.browser import axe_violations, open_page

    backend = create_app(audited.settings)
    mount_explorer(backend, PREFIX)
    options = {} if viewport is None else {"viewport": viewport, "is_mobile": True, "has_touch": True}
    name = "phone" if viewport else "desktop"
    with serve_app(backend, free_port()) as url, open_page(browser, page_errors, **options) as page:
        reply = page.goto(f"{url}{PREFIX}/submissions/{audited.pool_id}/{audited.keys['over']}")
        assert reply is not None and reply.status == 200
        page.evaluate("() => document.querySelectorAll('details').forEach(d => { d.open = true; })")
        assert page.locator("details.evidence").count() == 3
        assert axe_violations(page) == []
        assert page.evaluate("() => document.documentElement.scrollWidth") <= page.viewport_size["width"]
        screenshot(page, f"evidence-{name}")

        with page.expect_navigation():
            page.get_by_role("button", name="Verify against the chain").click()  # a plain form POST
        assert page.locator('[data-verified="ok"]').count() == 1
        assert page.locator('[data-table="checks"] tbody tr').count() == len(CHECK_NAMES)
        assert axe_violations(page) == []
        assert page.evaluate("() => document.documentElement.scrollWidth") <= page.viewport_size["width"]
        screenshot(page, f"verified-{name}")
    assert page_errors == []


# --- the command line -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def served(audited: AuditedMarket) -> Iterator[tuple[str, str]]:
    """The audited backend, and the chainless one, over real HTTP (the CLI talks HTTP)."""
    from proofpool.backend.app import create_app

    from proofpool.infra.chain.anvil import free_port
    from tests.fixtures.backend import serve_app

    with (
        serve_app(create_app(audited.settings), free_port()) as url,
        serve_app(
            create_app(audited.settings.model_copy(update={"rpc_url": "http://127.0.0.1:9"})), free_port()
        ) as down,
    ):
        yield url, down


def cli(*args: str) -> Any:
    from proofpool.cli.main import app
    from typer.testing import CliRunner

    return CliRunner().invoke(app, ["ledger", *args])


def test_the_cli_verifies_a_submission_and_exits_by_the_outcome(audited, served):
    url, down = served
    key = audited.keys["bad"]
    honest = cli("verify-submission", str(audited.pool_id), key, "--backend-url", url)
    assert honest.exit_code == 0, honest.output
    assert f"submission {key} of pool {audited.pool_id}: OK" in honest.output
    assert all(f"ok   {name}:" in honest.output for name in CHECK_NAMES), honest.output
    audited.sql("UPDATE verdicts SET reason = 'made_up' WHERE work_key = %s", (audited.key_bytes("bad"),))
    try:
        tampered = cli("verify-submission", str(audited.pool_id), key, "--backend-url", url, "--json")
    finally:
        audited.sql("UPDATE verdicts SET reason = 'sampling_mismatch' WHERE work_key = %s", (audited.key_bytes("bad"),))
    assert tampered.exit_code == 1, tampered.output
    assert failed(json.loads(tampered.output)).keys() == {"verdicts"}
    unreachable = cli("verify-submission", str(audited.pool_id), key, "--backend-url", down)
    assert unreachable.exit_code == 2 and "could not check" in unreachable.output, unreachable.output


def test_the_cli_lists_each_verdicts_evidence_and_its_commitment(audited, served):
    url, _ = served
    shown = cli("evidence", str(audited.pool_id), audited.keys["bad"], "--backend-url", url)
    assert shown.exit_code == 0, shown.output
    assert "invalid (sampling_mismatch) by" in shown.output and "matches" in shown.output
    as_json = json.loads(
        cli("evidence", str(audited.pool_id), audited.keys["bad"], "--backend-url", url, "--json").output
    )
    assert [row["status"] for row in as_json["verdicts"]] == [row["status"] for row in audited.evidence("bad")]

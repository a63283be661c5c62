"""The explorer in a real browser (Playwright driving Debian's Chromium, `tests/fixtures/browser.py`)
against a real devnet market: anvil, SeaweedFS, the indexer, the backend serving the explorer under
`/explorer`, two validators, the trainer and four workers, the fourth cheating (`other-model`).

One market for the module, in two phases:

- while the RL loop runs, the pool page is opened and its live feed must show a new verdict row
  without a reload (the page's script polls `/pools/{id}/feed`);
- once the trainer is done, the cheater slashed, every submission judged and accepted work finalized
  (`settle`), with the backend still up, every page is checked against the ledger API it reads
  (`/v1/ledger/...`, asked here directly): the cheater slashed with its reason code, the leaderboard
  row for row, the market's numbers, CSV downloads equal to the tables shown; plus no console
  errors, no serious or critical axe-core violations at a desktop and a phone viewport, no sideways
  scrolling on the phone, and the keyboard reaching the first pool link.

A full-page screenshot of each page is saved with the harness's `screenshot` (under the test's
tmp_path, or `$PROOFPOOL_SCREENSHOT_DIR`). With `PROOFPOOL_WRITE_DOCS_SCREENSHOTS=1`, the desktop
market and pool pages are also written to `docs/images/` for the README and docs/explorer.md.
"""

from __future__ import annotations

import csv
import io
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page
from proofpool.backend.api.ledger import csv_cell
from proofpool.devnet.adversary import EXPECTED_REASONS, CheatMode, drill_environment, other_model
from proofpool.devnet.market import DEVNET_MODEL_URI
from proofpool.devnet.progress import read_snapshot
from proofpool.devnet.run import DevnetConfig, DevnetRun, check_services, follow, market, settle, start_loop
from proofpool.devnet.services import stop_all, wait_until
from proofpool.explorer.pages.market import MARKET_STATS
from proofpool.explorer.pages.pool import ranked

from proofpool.core.spec import NO_SPEC
from proofpool.envs import resolve_base_model
from proofpool.infra.http.ledger_client import LedgerClient
from tests.fixtures.browser import AxeViolation, FocusedElement, PageError, axe_violations, open_page, tab_order
from tests.fixtures.explorer_markup import PageMarkup, parse_page

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

Row = dict[str, Any]
Screenshot = Callable[[Page, str], Path]

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCS_IMAGES = REPO_ROOT / "docs" / "images"
WRITE_DOCS_SCREENSHOTS = "PROOFPOOL_WRITE_DOCS_SCREENSHOTS"
"""Set to 1 to (re)write docs/images/explorer-market.png and explorer-pool.png from this run."""
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
CHEAT = CheatMode.OTHER_MODEL
LIVE_VERDICT_TIMEOUT_MS = 180_000
"""How long the open pool page may wait for its feed to show a verdict it did not load with: the
workers load their engines, generate, upload and submit, then a validator judges (a minute or two
on two cores)."""
MAX_TABS = 12
"""Tab presses from the top of the market page within which its first pool link must take the focus."""
CHEATER_SLASHED_TIMEOUT = 150.0
"""Seconds, after the trainer is done, for the cheater's first invalid verdict to be on the ledger."""


@dataclass(frozen=True)
class ExplorerMarket:
    """The running devnet market and where its explorer and ledger API are."""

    run: DevnetRun

    @property
    def backend_url(self) -> str:
        return self.run.stack.backend_url

    @property
    def url(self) -> str:
        """The explorer's root, as `backend serve` mounts it."""
        return f"{self.backend_url}/explorer"

    @property
    def pool_id(self) -> int:
        return self.run.stack.pool_id

    def api(self, listing: str, **filters: Any) -> list[Row]:
        """Every row of a ledger list matching `filters`, from the API the explorer reads."""
        with LedgerClient(self.backend_url) as ledger:
            return ledger.items(listing, filters)

    def submission(self, work_key: str) -> Row:
        """`/v1/ledger/submissions/{pool}/{key}`: the submission with its verdicts, slashes, credits."""
        with LedgerClient(self.backend_url) as ledger:
            reply = ledger.get(f"submissions/{self.pool_id}/{work_key}", {})
        return reply.json()

    def account(self, name: str) -> str:
        """The address of a cast member by name (`dave`, `dave_node`, `validator`)."""
        return getattr(self.run.stack.cast, name).address

    @property
    def cheater(self) -> str:
        assert self.run.cheater is not None
        return self.run.cheater


@pytest.fixture(scope="module")
def live_market(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ExplorerMarket]:
    """The devnet market with its RL loop started (2 trainer steps of 64 accepted samples, four
    workers, dave's cheating); every process is stopped at the module's end."""
    check_services()
    # Built once here, before the processes would each build them (as `proofpool devnet run` does).
    resolve_base_model(DEVNET_MODEL_URI)
    other_model(drill_environment(DEVNET_MODEL_URI, NO_SPEC))
    config = DevnetConfig(
        out_dir=tmp_path_factory.mktemp("explorer-devnet"),
        steps=2,
        samples_per_step=64,
        cheat=CHEAT.value,
        heldout_problems=0,
        database="proofpool_test_e2e_explorer",
        redis_db=1,
        step_timeout=300,
        verdict_timeout=120,
    )
    with market(config, print) as (stack, _store):
        run = start_loop(config, stack, print)
        try:
            yield ExplorerMarket(run)
        finally:
            stop_all(run.processes, timeout=30)


def cheater_slashed(run: DevnetRun) -> bool:
    return any(n.name == run.cheater and n.invalid > 0 for n in read_snapshot(run.stack, run).nodes)


@pytest.fixture(scope="module")
def settled(live_market: ExplorerMarket) -> ExplorerMarket:
    """The market once the trainer is done and the cheater slashed (the workers keep submitting
    until then), every submission judged and accepted work finalized; the backend stays up."""
    run = live_market.run
    follow(run, lambda _run, _snapshot: None)
    wait_until(lambda: cheater_slashed(run), timeout=CHEATER_SLASHED_TIMEOUT, what="the cheater's invalid verdict")
    settle(run, print)
    return live_market


def goto(page: Page, url: str) -> PageMarkup:
    """Open `url` (it must answer 200) and read its tables back from the live DOM."""
    reply = page.goto(url)
    assert reply is not None and reply.status == 200, (url, reply and reply.status)
    return parse_page(page.content())


def api_cells(row: Row, columns: list[str]) -> dict[str, str]:
    """`row` as a page's cells carry it (`data-value`): the API's CSV text of each shown column."""
    return {name: csv_cell(row.get(name)) for name in columns}


def assert_same_rows(shown: list[dict[str, str]], expected: list[Row]) -> None:
    """The rows a page shows are the API's rows, in order, each cell its API value."""
    assert shown, "the page shows no rows to compare"
    assert shown == [api_cells(row, list(shown[0])) for row in expected]


def cell_text(page: Page, table: str, work_key: str, column: str) -> str:
    """The text people read in `column` of the row of `table` about `work_key`."""
    row = page.locator(f'[data-table="{table}"] tbody tr').filter(
        has=page.locator(f'td[data-col="work_key"][data-value="{work_key}"]')
    )
    return row.locator(f'td[data-col="{column}"]').inner_text().strip()


# --- while the loop runs -------------------------------------------------------------------------


FEED_VERDICTS = """() => [...document.querySelectorAll('#live-feed tbody tr')]
    .filter(tr => tr.querySelector('td[data-col="event"]')?.dataset.value === 'verdict')
    .map(tr => tr.dataset.position)"""


def test_live_feed_shows_a_new_verdict_without_reload(
    live_market: ExplorerMarket, page: Page, page_errors: list[PageError]
) -> None:
    assert live_market.run.trainer is not None and live_market.run.trainer.alive, "the loop is not running"
    goto(page, f"{live_market.url}/pools/{live_market.pool_id}")
    loaded_with: list[str] = page.evaluate(FEED_VERDICTS)
    page.evaluate("() => { window.__loadedOnce = true; }")  # gone if the page reloads

    page.wait_for_function(
        f"loaded => ({FEED_VERDICTS})().some(position => !loaded.includes(position))",
        arg=loaded_with,
        timeout=LIVE_VERDICT_TIMEOUT_MS,
        polling=500,
    )

    assert page.evaluate("() => window.__loadedOnce === true"), "the page reloaded"
    assert "new event" in page.locator("#live-feed .feed-status").inner_text()
    markup = parse_page(page.content())
    positions = markup.positions["feed"]
    assert positions == sorted(positions, key=chain_position, reverse=True), "the feed is not newest first"
    # Each new verdict row is the ledger's verdict at that chain position, as the API tells it.
    shown = dict(zip(positions, markup.tables["feed"], strict=True))
    verdicts = {
        f"{v['block_number']}-{v['log_index']}": v for v in live_market.api("verdicts", pool_id=live_market.pool_id)
    }
    new = [p for p, row in shown.items() if row["event"] == "verdict" and p not in loaded_with]
    assert new
    for position in new:
        verdict = verdicts[position]
        assert shown[position] == {
            "block_number": str(verdict["block_number"]),
            "event": "verdict",
            "work_key": verdict["work_key"],
            "account": verdict["validator"],
            "outcome": verdict["verdict"],
            "reason": csv_cell(verdict["reason"]),
            "work_units": "",
            "tx_hash": verdict["tx_hash"],
        }
    assert page_errors == []


def chain_position(position: str) -> tuple[int, int]:
    block, log = position.split("-")
    return int(block), int(log)


# --- after the run settled -----------------------------------------------------------------------


def invalid_submissions(m: ExplorerMarket) -> list[tuple[Row, Row]]:
    """The cheater's invalid submissions, each with its invalid verdict, from the API."""
    node = m.account(f"{m.cheater}_node")
    verdicts = {v["work_key"]: v for v in m.api("verdicts", pool_id=m.pool_id, verdict="invalid")}
    return [(s, verdicts[s["work_key"]]) for s in m.api("submissions", node=node, status="invalid")]


def test_the_cheater_appears_slashed_with_its_reason(
    settled: ExplorerMarket, page: Page, page_errors: list[PageError]
) -> None:
    provider, node = settled.account(settled.cheater), settled.account(f"{settled.cheater}_node")
    invalid = invalid_submissions(settled)
    assert invalid, "the cheater has no invalid submission on the ledger"
    reasons = {verdict["reason"] for _, verdict in invalid}
    assert reasons <= EXPECTED_REASONS[CHEAT], reasons
    (stake,) = [row for row in settled.api("providers") if row["address"] == provider]
    slashes = settled.api("slashes", provider=provider)
    assert int(stake["slashed_total"]) > 0 and slashes

    shown = goto(page, f"{settled.url}/providers/{provider}")
    assert shown.records["stake"]["slashed_total"] == stake["slashed_total"]
    assert_same_rows(shown.tables["slashes"], slashes)
    by_key = {row["work_key"]: row for row in shown.tables["submissions"]}
    for submission, verdict in invalid:
        assert by_key[submission["work_key"]]["status"] == "invalid"
        assert by_key[submission["work_key"]]["reason"] == verdict["reason"]
        assert cell_text(page, "submissions", submission["work_key"], "reason") == verdict["reason"]

    shown = goto(page, f"{settled.url}/nodes/{node}")
    assert [row["state"] for row in shown.tables["memberships"]] == ["slashed"]

    submission, verdict = invalid[0]
    detail = settled.submission(submission["work_key"])
    shown = goto(page, f"{settled.url}/submissions/{settled.pool_id}/{submission['work_key']}")
    assert shown.records["submission"]["status"] == "invalid"
    assert page.locator("main .lead").inner_text().endswith("invalid")
    assert [(row["verdict"], row["reason"]) for row in shown.tables["verdicts"]] == [("invalid", verdict["reason"])]
    reason_cell = page.locator('[data-table="verdicts"] td[data-col="reason"]')
    assert reason_cell.inner_text().strip() == verdict["reason"]
    assert_same_rows(shown.tables["slashes"], detail["slashes"])
    assert {row["provider"] for row in shown.tables["slashes"]} == {provider}
    assert page_errors == []


def test_the_leaderboard_equals_the_contributors_row_for_row(
    settled: ExplorerMarket, page: Page, page_errors: list[PageError]
) -> None:
    contributors = settled.api("contributors", pool_id=settled.pool_id)
    assert len(contributors) == len(settled.run.workers)
    expected = sorted(contributors, key=lambda row: (-row["work_units_accepted"], row["node"]))
    assert expected == ranked(contributors)  # the explorer's order is the one the brief states

    shown = goto(page, f"{settled.url}/pools/{settled.pool_id}").tables["leaderboard"]
    assert_same_rows(shown, expected)
    assert {"node", "provider", "work_units_accepted", "rewards", "slashed"} <= set(shown[0])
    assert page_errors == []


def test_the_market_and_pool_numbers_equal_the_ledger(
    settled: ExplorerMarket, page: Page, page_errors: list[PageError]
) -> None:
    pid = settled.pool_id
    (stats,) = settled.api("pool_stats", pool_id=pid)
    (pool,) = [row for row in settled.api("pools") if row["pool_id"] == pid]
    checkpoints = settled.api("checkpoints", pool_id=pid)
    members = settled.api("memberships", pool_id=pid, state="active")
    assert stats["pending"] == 0 and stats["invalid"] >= 1 and int(stats["slashed"]) > 0
    assert stats["finalized"] >= 1 and int(stats["rewards_paid"]) > 0
    expected = {
        **pool,
        **stats,
        "latest_checkpoint": checkpoints[-1]["version"],
        "active_members": len(members),
    }

    (row,) = goto(page, f"{settled.url}/").tables["pools"]
    assert row == api_cells(expected, list(row))
    assert {*MARKET_STATS, "budget", "active_members"} <= set(row)
    assert row["latest_checkpoint"] == str(settled.run.config.steps)

    record = goto(page, f"{settled.url}/pools/{pid}").records["stats"]
    assert record == api_cells(stats, list(record))
    assert set(record) == set(stats) - {"pool_id"}
    assert page_errors == []


def csv_download(page: Page, table: str) -> list[dict[str, str]]:
    """Click the table's "Download CSV" link and read the file the browser saved."""
    with page.expect_download() as download:
        page.locator(f'a[download][href*="table={table}"]').click()
    path = download.value.path()
    header, *body = csv.reader(io.StringIO(Path(path).read_text(encoding="utf-8")))
    return [dict(zip(header, row, strict=True)) for row in body]


@pytest.mark.parametrize("who", ["cheater", "alice"])
def test_each_csv_download_equals_the_table_shown(
    settled: ExplorerMarket, page: Page, page_errors: list[PageError], who: str
) -> None:
    provider = settled.account(settled.cheater if who == "cheater" else who)
    shown = goto(page, f"{settled.url}/providers/{provider}")
    tables = {**shown.tables, **{name: [record] for name, record in shown.records.items()}}
    filled = {name: rows for name, rows in tables.items() if rows}
    assert {"stake", "nodes", "submissions"} <= set(filled)
    assert ("slashes" if who == "cheater" else "rewards") in filled
    for name, rows in filled.items():
        downloaded = csv_download(page, name)
        assert downloaded == rows, name
        assert list(downloaded[0]) == list(rows[0]), name  # same columns, same order
    assert page_errors == []


# --- every page: accessibility, phones, screenshots, keyboard --------------------------------------


def page_paths(m: ExplorerMarket) -> dict[str, str]:
    """One page of each kind, about the cheater where it can be."""
    submission, _ = invalid_submissions(m)[0]
    return {
        "market": "/",
        "pool": f"/pools/{m.pool_id}",
        "provider": f"/providers/{m.account(m.cheater)}",
        "node": f"/nodes/{m.account(f'{m.cheater}_node')}",
        "validator": f"/validators/{m.account('validator')}",
        "submission": f"/submissions/{m.pool_id}/{submission['work_key']}",
        "search": "/search",
    }


@pytest.mark.parametrize(
    "viewport, options",
    [
        pytest.param("desktop", {"viewport": DESKTOP}, id="desktop"),
        pytest.param("phone", {"viewport": PHONE, "is_mobile": True, "has_touch": True}, id="phone"),
    ],
)
def test_every_page_is_accessible_and_fits_the_screen(
    settled: ExplorerMarket,
    browser: Browser,
    page_errors: list[PageError],
    screenshot: Screenshot,
    viewport: str,
    options: dict[str, Any],
) -> None:
    violations: dict[str, list[AxeViolation]] = {}
    overflowing: dict[str, int] = {}
    with open_page(browser, page_errors, **options) as page:
        for name, path in page_paths(settled).items():
            goto(page, settled.url + path)
            violations[name] = axe_violations(page)
            width = page.evaluate("() => document.documentElement.scrollWidth")
            if width > options["viewport"]["width"]:
                overflowing[name] = width
            shot = screenshot(page, f"{name}-{viewport}")
            if viewport == "desktop" and name in ("market", "pool") and os.environ.get(WRITE_DOCS_SCREENSHOTS) == "1":
                DOCS_IMAGES.mkdir(exist_ok=True)
                shutil.copyfile(shot, DOCS_IMAGES / f"explorer-{name}.png")
    assert {name: found for name, found in violations.items() if found} == {}
    assert overflowing == {}, "the page scrolls sideways (each table should scroll in its own box)"
    assert page_errors == []


def test_tab_from_the_top_of_the_market_reaches_the_first_pool_link(
    settled: ExplorerMarket, page: Page, page_errors: list[PageError]
) -> None:
    goto(page, f"{settled.url}/")
    pool_link = f"/explorer/pools/{settled.pool_id}"
    order: list[FocusedElement] = []
    while len(order) < MAX_TABS and not (order and order[-1].href == pool_link):
        order += tab_order(page, 1)
    assert order[-1] == FocusedElement("a", str(settled.pool_id), pool_link), order
    assert order[0].text == "Skip to content"
    page.keyboard.press("Enter")
    page.wait_for_url(f"{settled.url}/pools/{settled.pool_id}")
    assert page.locator("h1").inner_text() == f"Pool {settled.pool_id}"
    assert page_errors == []

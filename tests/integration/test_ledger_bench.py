"""`bench/ledger.py` at a small size, end to end: it fills a database of its own, serves it with
`backend serve`'s app, and times every ledger query (at both layers) and every explorer page; a
request answered with anything but a page (or a search's redirect) stops it. The figures at
1,000,000 submissions are docs/benchmarks.md's; here, that every scenario runs and reports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from proofpool.infra import db
from proofpool.infra.config import REPO_ROOT, get_settings

pytestmark = pytest.mark.timeout(300)


def bench_databases() -> set[str]:
    with psycopg.connect(db.with_database(get_settings().database_url, "postgres")) as conn:
        rows = conn.execute("SELECT datname FROM pg_database WHERE datname LIKE 'proofpool_bench_ledger_%'")
        return {name for (name,) in rows.fetchall()}


def test_the_ledger_bench_times_every_query_and_page_at_a_small_size(tmp_path: Path) -> None:
    before = bench_databases()
    results = tmp_path / "ledger.jsonl"
    done = subprocess.run(
        [sys.executable, "bench/ledger.py", "--rows", "3000", "--requests", "3", "--page-requests", "2",
         "--results", str(results)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    printed = [json.loads(line) for line in done.stdout.splitlines()]
    fill, timed = printed[0], printed[1:]
    assert fill["fill"]["submissions"] == 3000 and fill["fill"]["verdicts"] > 0 and fill["fill"]["rewards"] > 0
    assert [json.loads(line) for line in results.read_text().splitlines()] == timed

    layers = {(line["scenario"], line["layer"]) for line in timed}
    api = {name for name, layer in layers if layer == "db"}
    pages = {name for name, _ in layers} - api
    assert {"pool_desc", "all_deep_desc", "provider_lookup", "pool_lookup", "submission_tx", "verdict_tx",
            "file_in_bundle", "file_work_key"} <= api  # fmt: skip
    assert {(name, "http") for name in api} <= layers
    assert pages == {"explorer_market", "explorer_pool", "explorer_provider", "explorer_node", "explorer_validator",
                     "explorer_submission", "explorer_search_tx", "explorer_search_file"}  # fmt: skip
    for line in timed:
        assert 0 < line["p50_ms"] <= line["p99_ms"] <= line["max_ms"], line
        assert line["rows"] == 3000
        assert line["target_p99_ms"] == (50 if line["scenario"] in api else 100)
        assert line["meets_target"] == (line["p99_ms"] <= line["target_p99_ms"])
    assert bench_databases() <= before  # its database is dropped

"""Checkpoint metrics end to end on the real services: checkpoints published with their trainer's
figures to SeaweedFS and anvil (`publish_checkpoint`), indexed into PostgreSQL by the indexer, whose
checkpoint metrics reader verifies each file (manifest against the chain, file against the manifest);
the ledger API serves the figures and the pool page draws them. Also: a tampered file, a checkpoint
anchored without files, a reorg that replaces a checkpoint, pruning, and what workers make of the
extra file."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import psycopg
import pytest
import torch
from fastapi.testclient import TestClient
from proofpool.backend.db import checkpoint_metrics as reads_db
from proofpool.backend.indexer.checkpoint_metrics import MISSING_ATTEMPTS, read_due
from proofpool.backend.indexer.decode import FastDecoder
from proofpool.backend.indexer.follow import Indexer, IndexerOptions
from proofpool.backend.indexer.source import ChainSource
from proofpool.explorer.app import mount_explorer
from proofpool.worker.models import same_model
from proofpool_arithmetic.build import ModelManifest, ModelSpec, init_model, save_model

from proofpool.core.ledger_listings import CHECKPOINT_FIGURES, csv_cell
from proofpool.inference.model import load_model
from proofpool.infra.chain.bindings import PoolParams
from proofpool.infra.checkpoint import (
    METRICS_NAME,
    CheckpointError,
    PublishedCheckpoint,
    Reason,
    ensure_checkpoint,
    metrics_record_prefix,
    parse_metrics,
    prune_checkpoints,
    publish_checkpoint,
)
from proofpool.infra.config import Settings
from proofpool.infra.storage import ObjectStore
from tests.fixtures.deployment import Deployment
from tests.fixtures.explorer_markup import assert_accessible_structure, parse_page
from tests.fixtures.ledger import ledger_redis_url
from tests.fixtures.postgres import migrated_database

pytestmark = pytest.mark.timeout(300)

SPEC = ModelSpec(seed=5, hidden=32, layers=1, heads=2)
SHARD = 40_000
SERVED = tuple(column.name for column in CHECKPOINT_FIGURES)
STEPS = [
    {"mean_reward": 0.125, "loss": 0.031, "samples": 64, "tokens": 900, "grad_norm": 1.5, "clip_low_frac": 0.01},
    {"mean_reward": 0.375, "loss": -0.012, "samples": 60, "tokens": 870, "grad_norm": 0.75},
    {"mean_reward": 0.5, "loss": 0.0, "samples": 64, "tokens": 910, "grad_norm": 0.5},
]
"""The figures of versions 1, 2 and 3 (clip_low_frac: a figure the file carries, the ledger does not serve)."""


@dataclass
class Stack:
    deployment: Deployment
    store: ObjectStore
    prefix: str
    url: str
    api: TestClient

    def pool(self) -> int:
        params = PoolParams(
            manager=self.deployment.manager.address,
            treasury=self.deployment.admin.address,
            model_uri="devnet://checkpoint-metrics-test",
            reward_per_unit=1,
            validator_fee=1,
            slash_amount=1,
            dispute_window=60,
            validator_slash_share_bps=5_000,
        )
        return self.deployment.admin.pool.create_pool(params)[0]

    def publish(self, pool: int, version: int, model: Path, figures: dict[str, Any] | None) -> PublishedCheckpoint:
        return publish_checkpoint(
            self.deployment.manager, self.store, pool, version, model, SHARD, prefix=self.prefix, figures=figures
        )

    def index(self) -> None:
        """Index the chain up to its head, then read every checkpoint's figures that are due."""
        client = self.deployment.admin
        source = ChainSource(client.w3, FastDecoder(client.book.addresses))
        options = IndexerOptions(batch_blocks=500, poll_interval=0.05, max_backoff=0.5)
        Indexer(source, client.book, self.url, options, None, self.store).run(once=True)

    def rows(self, pool: int) -> list[dict[str, Any]]:
        reply = self.api.get("/v1/ledger/checkpoint_metrics", params={"pool_id": pool, "limit": 1000})
        assert reply.status_code == 200, reply.text
        return reply.json()["items"]

    def sql(self, query: str, params: Any = None) -> list[tuple]:
        with psycopg.connect(self.url, autocommit=True) as conn:
            cursor = conn.execute(query, params)
            return cursor.fetchall() if cursor.description else []


@pytest.fixture(scope="module")
def stack(deployment, object_store, tmp_path_factory) -> Iterator[Stack]:
    prefix = f"test/metrics-{hashlib.sha256(str(tmp_path_factory.getbasetemp()).encode()).hexdigest()[:12]}/"
    with migrated_database("proofpool_test_ckmetrics") as url:
        from proofpool.backend.app import create_app

        app = create_app(Settings(DATABASE_URL=url, REDIS_URL=ledger_redis_url()))
        mount_explorer(app, "/explorer")
        with TestClient(app, follow_redirects=False) as api:
            yield Stack(deployment, object_store, prefix, url, api)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> list[Path]:
    """Three tiny models, each a "training step" after the one before (the output head moved)."""
    first = init_model(tmp_path_factory.mktemp("m") / "v1", seed=SPEC.seed, hidden=SPEC.hidden, layers=1, heads=2)
    out = [first]
    for n in (2, 3):
        model = load_model(out[-1])
        with torch.no_grad():
            model.lm_head.weight.mul_(1.25)
        out.append(save_model(model, tmp_path_factory.mktemp("m") / f"v{n}", ModelManifest(spec=SPEC)))
    return out


@pytest.fixture(scope="module")
def trained(stack, models) -> tuple[int, list[PublishedCheckpoint]]:
    """A pool whose trainer published versions 1-3 with figures, then pruned all but the latest
    (as `trainer run` with async level 0 does), indexed and read."""
    pool = stack.pool()
    published = [stack.publish(pool, n + 1, models[n], STEPS[n]) for n in range(3)]
    assert prune_checkpoints(stack.store, pool, keep_from=3, prefix=stack.prefix) == [1, 2]
    stack.index()
    return pool, published


def served(figures: dict[str, Any]) -> dict[str, Any]:
    return {name: figures.get(name) for name in SERVED}


def test_the_ledger_serves_each_checkpoints_figures_as_its_anchored_file_holds_them(stack, trained):
    pool, published = trained
    rows = stack.rows(pool)
    assert [row["version"] for row in rows] == [1, 2, 3]
    for row, checkpoint, figures in zip(rows, published, STEPS, strict=True):
        assert row["manifest_sha256"] == "0x" + checkpoint.manifest_sha256.hex()
        assert (row["status"], row["detail"]) == ("verified", None)
        assert {name: row[name] for name in SERVED} == served(figures)
        entry = checkpoint.manifest.entry(METRICS_NAME)  # the file is one of the anchored manifest's files
        record = metrics_record_prefix(pool, checkpoint.manifest_sha256.hex(), stack.prefix)
        stored = stack.store.get_object(record + METRICS_NAME)
        assert hashlib.sha256(stored).hexdigest() == entry.sha256
        assert dict(parse_metrics(stored).figures) == figures
    assert type(rows[0]["samples"]) is int and type(rows[0]["loss"]) is float
    csv = stack.api.get("/v1/ledger/checkpoint_metrics", params={"pool_id": pool, "format": "csv"}).text
    assert csv.splitlines()[1].split(",")[:4] == [str(pool), "1", rows[0]["manifest_sha256"], "verified"]


def test_pruning_keeps_the_figures_and_workers_still_cannot_fetch_a_pruned_version(stack, trained, tmp_path):
    pool, published = trained
    gone = f"{stack.prefix}pools/{pool}/checkpoints/1/"
    assert list(stack.store.list_objects(gone)) == []
    with pytest.raises(CheckpointError) as refused:
        ensure_checkpoint(stack.store, published[0].uri, published[0].manifest_sha256, tmp_path / "cache")
    assert refused.value.reason is Reason.MANIFEST_MISSING
    assert [row["status"] for row in stack.rows(pool)[:2]] == ["verified", "verified"]


def test_workers_take_checkpoints_that_differ_in_weights_and_metrics_for_the_same_model(stack, models, tmp_path):
    pool = stack.pool()
    a = stack.publish(pool, 1, models[0], STEPS[0])
    b = stack.publish(pool, 2, models[1], STEPS[1])
    cache = tmp_path / "cache"
    first = ensure_checkpoint(stack.store, a.uri, a.manifest_sha256, cache)
    second = ensure_checkpoint(stack.store, b.uri, b.manifest_sha256, cache)
    assert (first / METRICS_NAME).read_bytes() != (second / METRICS_NAME).read_bytes()
    assert same_model(first, second) and same_model(second, first)


def test_a_tampered_metrics_object_is_a_mismatch_and_never_served(stack, models):
    pool = stack.pool()
    checkpoint = stack.publish(pool, 1, models[0], STEPS[0])
    forged = checkpoint.manifest.entry(METRICS_NAME)
    body = stack.store.get_object(f"{stack.prefix}pools/{pool}/checkpoints/1/{METRICS_NAME}")
    better = body.replace(b'"mean_reward":0.125', b'"mean_reward":0.925')
    assert better != body
    for place in (
        metrics_record_prefix(pool, checkpoint.manifest_sha256.hex(), stack.prefix),
        f"{stack.prefix}pools/{pool}/checkpoints/1/",
    ):
        stack.store.put_object(place + METRICS_NAME, better)
    stack.index()
    [row] = stack.rows(pool)
    assert row["status"] == "mismatch" and forged.sha256 in row["detail"]
    assert all(row[name] is None for name in SERVED)


def test_a_checkpoint_anchored_without_files_is_missing_a_few_times_then_for_good(stack):
    pool = stack.pool()
    digest = hashlib.sha256(b"a manifest nobody uploaded").digest()
    uri = f"s3://{stack.store.bucket}/{stack.prefix}pools/{pool}/checkpoints/1/"
    stack.deployment.manager.pool.publish_checkpoint(pool, 1, digest, uri)
    stack.index()
    [row] = stack.rows(pool)
    assert row["status"] == "missing" and "no manifest" in row["detail"]
    due = "UPDATE checkpoint_metric_reads SET retry_at = now() WHERE pool_id = %s AND retry_at IS NOT NULL"
    with psycopg.connect(stack.url, autocommit=True) as conn:
        for _ in range(MISSING_ATTEMPTS + 2):
            conn.execute(due, (pool,))
            read_due(conn, stack.store)
        assert all(c.pool_id != pool for c in reads_db.to_read(conn, 1000))
    [(attempts, retry_at)] = stack.sql(
        "SELECT attempts, retry_at FROM checkpoint_metric_reads WHERE pool_id = %s", (pool,)
    )
    assert (attempts, retry_at) == (MISSING_ATTEMPTS, None)
    assert stack.rows(pool)[0]["status"] == "missing"


def test_figures_are_served_only_for_the_checkpoint_the_chain_has_now(stack, trained):
    """A reorg that replaces checkpoint 1 (the indexer deletes its row and indexes the new one)
    leaves the read of the old manifest in place but unserved; the old checkpoint coming back
    finds it again."""
    pool, published = trained
    old = published[0].manifest_sha256
    other = hashlib.sha256(b"the manifest of the other branch").digest()
    replace = "UPDATE checkpoints SET manifest_sha256 = %s WHERE pool_id = %s AND version = 1"
    try:
        stack.sql(replace, (other, pool))
        row = stack.rows(pool)[0]
        assert (row["version"], row["manifest_sha256"], row["status"]) == (1, "0x" + other.hex(), "pending")
        assert all(row[name] is None for name in SERVED)
        assert stack.sql("SELECT status FROM checkpoint_metric_reads WHERE manifest_sha256 = %s", (old,)) == [
            ("verified",)
        ]
    finally:
        stack.sql(replace, (old, pool))
    assert stack.rows(pool)[0]["status"] == "verified"


class _Charts(HTMLParser):
    """Each chart's points: {figure: [(data-version, data-value)]}, and its svg's attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.points: dict[str, list[tuple[str, str]]] = {}
        self.svgs: dict[str, dict[str, str]] = {}
        self._chart: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "figure" and "data-chart" in a:
            self._chart = a["data-chart"]
            self.points[self._chart] = []
        elif tag == "svg" and self._chart:
            self.svgs[self._chart] = a
        elif tag == "circle" and self._chart:
            self.points[self._chart].append((a["data-version"], a["data-value"]))

    def handle_endtag(self, tag: str) -> None:
        if tag == "figure":
            self._chart = None


def test_the_pool_page_draws_the_reward_and_loss_curves_from_the_listing_rows(stack, trained):
    pool, _ = trained
    reply = stack.api.get(f"/explorer/pools/{pool}")
    assert reply.status_code == 200, reply.text[:500]
    charts = _Charts()
    charts.feed(reply.text)
    rows = stack.rows(pool)
    assert set(charts.points) == {"mean_reward", "loss"}
    for figure, points in charts.points.items():
        assert points == [(str(row["version"]), csv_cell(row[figure])) for row in rows]
        svg = charts.svgs[figure]
        assert svg["role"] == "img" and "3 checkpoints (versions 1 to 3)" in svg["aria-label"]
    page = parse_page(reply.text)
    assert_accessible_structure(page)
    shown = page.tables["training"]
    assert [r["version"] for r in shown] == ["1", "2", "3"]
    assert [r["mean_reward"] for r in shown] == [csv_cell(row["mean_reward"]) for row in rows]
    assert "inner_loss" not in shown[0]  # a GRPO pool's table leaves out the DiLoCo figures
    csv = stack.api.get(f"/explorer/pools/{pool}", params={"format": "csv", "table": "training"})
    assert csv.status_code == 200 and csv.text.splitlines()[1].startswith("1,verified,0.125,0.031,")


def test_a_pool_without_figures_says_so(stack, models):
    """A checkpoint published without figures (a pool manager's `publish-checkpoint`) is `unlisted`."""
    pool = stack.pool()
    stack.publish(pool, 1, models[0], None)
    stack.index()
    [row] = stack.rows(pool)
    assert row["status"] == "unlisted" and all(row[name] is None for name in SERVED)
    reply = stack.api.get(f"/explorer/pools/{pool}")
    assert reply.status_code == 200
    assert "No checkpoint of this pool carries verified training figures yet." in reply.text
    assert "<svg" not in reply.text
    [shown] = parse_page(reply.text).tables["training"]
    assert (shown["status"], shown["detail"]) == ("unlisted", row["detail"])

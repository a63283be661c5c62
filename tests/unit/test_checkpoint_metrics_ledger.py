"""From a checkpoint's metrics file to the `checkpoint_metrics` listing: the figures the trainer and
the aggregator write are the ones the listing serves, and each read becomes the row to store
(`settle`): served figures of a verified file, a final status otherwise, `missing` retried a
bounded number of times."""

from __future__ import annotations

import dataclasses
import math

import pytest
from proofpool.backend.db.checkpoint_metrics import FIGURES, RECORD, CheckpointToRead
from proofpool.backend.indexer.checkpoint_metrics import MISSING_ATTEMPTS, RETRY_SECONDS, settle
from proofpool.trainer.metrics import CHECKPOINT_FIGURES as TRAINER_FIGURES
from proofpool.trainer.metrics import checkpoint_figures
from proofpool.trainer.step import StepMetrics

from proofpool.core.ledger_listings import CHECKPOINT_FIGURES, CHECKPOINT_METRICS, Kind
from proofpool.infra.checkpoint import CheckpointMetrics, MetricsReading, MetricsStatus

CHECKPOINT = CheckpointToRead(pool_id=1, version=3, manifest_sha256=b"\x01" * 32, uri="s3://b/p/", attempts=0)
GRPO_SERVED = ("mean_reward", "loss", "samples", "tokens", "grad_norm")
DILOCO_SERVED = ("inner_loss", "inner_loss_last", "delta_norm", "contributors")


def step_metrics(**changes: object) -> StepMetrics:
    values = {field.name: 1 for field in dataclasses.fields(StepMetrics)}
    values.update(loss=-0.5, mean_reward=0.25, stepped=True, skipped_nonfinite=False, seconds=3.5)
    values.update(changes)
    return StepMetrics(**values)  # type: ignore[arg-type]


def test_the_listing_serves_the_figures_grpo_and_diloco_trainers_write():
    assert {column.name for column in CHECKPOINT_FIGURES} == {*GRPO_SERVED, *DILOCO_SERVED}
    assert set(GRPO_SERVED) <= set(TRAINER_FIGURES) <= {field.name for field in dataclasses.fields(StepMetrics)}
    assert tuple(column.name for column in CHECKPOINT_FIGURES) == FIGURES
    for name in FIGURES:  # every served figure is written and updated by the reader
        assert f"%({name})s" in RECORD and f"{name} = EXCLUDED.{name}" in RECORD


def test_the_listing_offers_every_status_a_read_can_end_in_and_pending():
    statuses = CHECKPOINT_METRICS.column("status").values
    assert set(statuses) == {"pending"} | {status.value for status in MetricsStatus}


def test_a_step_publishes_its_figures_but_not_its_times_flags_or_a_non_finite_loss():
    figures = checkpoint_figures(step_metrics())
    assert set(figures) == set(TRAINER_FIGURES) and figures["loss"] == -0.5
    assert "seconds" not in figures and "stepped" not in figures
    assert "loss" not in checkpoint_figures(step_metrics(loss=math.nan))
    CheckpointMetrics(1, 1, figures)  # a valid file


def test_a_verified_file_gives_the_served_figures_typed_by_their_columns():
    metrics = CheckpointMetrics(1, 3, {"mean_reward": 0.5, "loss": -1, "samples": 64.0, "clip_low_frac": 0.1})
    read = settle(CHECKPOINT, MetricsReading(MetricsStatus.VERIFIED, None, metrics))
    assert (read.status, read.detail, read.retry_after) == ("verified", None, None)
    assert read.figures == {**dict.fromkeys(FIGURES), "mean_reward": 0.5, "loss": -1.0, "samples": 64}
    assert type(read.figures["loss"]) is float and type(read.figures["samples"]) is int
    kinds = {column.name: column.kind for column in CHECKPOINT_FIGURES}
    assert kinds["samples"] is Kind.INT and kinds["loss"] is Kind.FLOAT


@pytest.mark.parametrize("samples", [2.5, -1])
def test_a_count_that_is_not_a_count_makes_the_file_malformed(samples):
    metrics = CheckpointMetrics(1, 3, {"mean_reward": 0.5, "samples": samples})
    read = settle(CHECKPOINT, MetricsReading(MetricsStatus.VERIFIED, None, metrics))
    assert read.status == "malformed" and "samples" in read.detail
    assert read.figures == dict.fromkeys(FIGURES) and read.retry_after is None


@pytest.mark.parametrize("status", [MetricsStatus.UNLISTED, MetricsStatus.MISMATCH, MetricsStatus.MALFORMED])
def test_every_other_outcome_is_final_and_carries_no_figure(status):
    read = settle(CHECKPOINT, MetricsReading(status, "why"))
    assert (read.status, read.detail, read.retry_after) == (status.value, "why", None)
    assert read.figures == dict.fromkeys(FIGURES)


def test_missing_is_read_again_with_a_growing_wait_then_final():
    waits = []
    for attempts in range(MISSING_ATTEMPTS):
        checkpoint = dataclasses.replace(CHECKPOINT, attempts=attempts)
        waits.append(settle(checkpoint, MetricsReading(MetricsStatus.MISSING, "gone")).retry_after)
    assert waits == [RETRY_SECONDS * 2**n for n in range(MISSING_ATTEMPTS - 1)] + [None]

"""Prometheus metrics of a validator process, served on its own port (`validator_metrics_port`:
the validate worker; the verdict sender uses the next port). Scrape both; Flower works too,
since every proofpool Celery app sends task events (`proofpool.infra.broker.make_celery`).
"""

from __future__ import annotations

import logging

from prometheus_client import Counter, Gauge, Histogram, start_http_server

log = logging.getLogger(__name__)

VALIDATIONS = Counter(
    "proofpool_validations_total", "Validation tasks by outcome and verdict reason.", ["outcome", "verdict", "reason"]
)
VALIDATION_SECONDS = Histogram(
    "proofpool_validation_seconds",
    "Time from task start to recorded decision.",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
)
VALIDATED_TOKENS = Counter("proofpool_validated_tokens_total", "Completion tokens recomputed (TOPLOC + sampling).")
REVIEWS = Counter("proofpool_reviews_total", "Reviews of other validators' rejections, by outcome.", ["outcome"])
VERDICT_TXS = Counter("proofpool_verdict_transactions_total", "Verdicts sent on-chain, by kind.", ["kind"])
STAGE_SECONDS = Histogram(
    "proofpool_submission_stage_seconds",
    "Seconds a submission spent in each stage, from its block to its verdict's block "
    "(indexing, dispatch, queue, checks, verdict_wait, verdict_tx; total: block to verdict block).",
    ["stage"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 1.5, 2, 3, 4, 5, 7.5, 10, 15, 20, 30, 60, 120, 300),
)
READY = Gauge(
    "proofpool_validator_ready",
    "1 once this worker takes tasks: the validate worker after its decoding child started and its models "
    "warmed up, the verdict sender at once.",
)
TASK_RETRIES = Counter("proofpool_validation_retries_total", "Validation tasks retried, by error.", ["error"])


def serve(port: int) -> None:
    """Expose the metrics on 127.0.0.1:`port` (0 = off)."""
    if port:
        start_http_server(port, addr="127.0.0.1")
        log.info("metrics on http://127.0.0.1:%d/metrics", port)

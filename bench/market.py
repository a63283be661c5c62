"""The devnet market for benchmarks: a throw-away database, Redis db, SeaweedFS and the stack
(anvil, indexer, backend) with alice's node onboarded; and the one way benches report figures.
"""

from __future__ import annotations

import json
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from proofpool.devnet.market import NODE_COMPUTE_UNITS, PROVIDER_STAKE, onboard_node
from proofpool.devnet.stack import DevnetStack, start_stack

from proofpool.infra import db
from proofpool.infra.config import get_settings
from proofpool.infra.storage.seaweed import SeaweedProcess, start_seaweed

RESULTS_DIR = Path(__file__).resolve().parent / "results"


@dataclass
class BenchMarket:
    root: Path
    stack: DevnetStack
    s3: SeaweedProcess


@contextmanager
def bench_market(name: str, redis_db: int, *, dispatch: bool) -> Iterator[BenchMarket]:
    """Everything up, alice's node registered and staked; all of it removed on exit."""
    root = Path(tempfile.mkdtemp(prefix=f"proofpool-bench-{name}-"))
    url = db.with_database(get_settings().database_url, f"proofpool_bench_{name}_{uuid.uuid4().hex[:8]}")
    redis_url = get_settings().redis_url.rsplit("/", 1)[0] + f"/{redis_db}"
    redis.Redis.from_url(redis_url).flushdb()
    db.ensure_database(url)
    try:
        db.upgrade(url)
        with start_seaweed(root / "s3", access_key="bench", secret_key="bench-secret", bucket="bench") as s3:
            stack = start_stack(
                root / "stack", database_url=url, redis_url=redis_url, s3_env=s3.env(), dispatch=dispatch, say=print
            )
            try:
                cast = stack.cast
                onboard_node(
                    stack.admin, cast.alice, cast.alice_node, PROVIDER_STAKE, NODE_COMPUTE_UNITS, pools=(stack.pool_id,)
                )
                yield BenchMarket(root, stack, s3)
            finally:
                stack.close()
    finally:
        db.drop_database(url)


def emit(name: str, rows: list[dict[str, Any]]) -> None:
    """Print the figures as JSON lines and write them to bench/results/<name>.jsonl."""
    for row in rows:
        print(json.dumps(row), flush=True)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / f"{name}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))

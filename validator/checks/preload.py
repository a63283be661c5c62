"""Imported once by the decoding forkserver (`proofpool.validator.checks.decode`): the checks, warmed up.

Each decoding child is a fresh fork of the forkserver, so whatever pyarrow and the checks set up
lazily on first use (Parquet reader state, compute kernels, allocator pools) would otherwise be
set up again for every file: a 32-row file took 48 ms in a child against 1 ms in-process on the
devnet's 2-core machine. Parsing one small honest file here, at import, does it once: 17 ms, of
which 13 ms is the fork round trip itself.
"""

from __future__ import annotations

import hashlib
import logging

from proofpool.validator.checks.facts import NO_TASKS, PoolRules, SubmissionFacts
from proofpool.validator.checks.file import ParsedFile, parse_file

from proofpool.core.rollout import RolloutFileMeta, RolloutSample, rollouts_bytes

log = logging.getLogger(__name__)

_NODE = "0x" + "00" * 20


def warm_up() -> None:
    """Parse one valid one-row rollout file through `parse_file`, as a child would."""
    row = RolloutSample(
        problem_id="warm-up",
        group_id=0,
        prompt_tokens=(1,),
        completion_tokens=(1,),
        reward=0.0,
        advantage=0.0,
        sampling_seed=0,
        temperature=1.0,
        model_version=0,
        proofs=b"",
    )
    data = rollouts_bytes(RolloutFileMeta(0, _NODE), [row])
    sub = SubmissionFacts(0, hashlib.sha256(data).digest(), _NODE, 1, 0)
    # Parsing reads limits only; no problem is looked up, so no pool's environment is needed.
    rules = PoolRules(
        latest_version=0,
        taskset=NO_TASKS,
        vocab_size=2,
        stop_token_ids=frozenset({1}),
        max_prompt_tokens=1,
        max_completion_tokens=1,
        batch_size=1,
        group_size=1,
    )
    parsed = parse_file(data, sub, rules)
    if not isinstance(parsed, ParsedFile):  # the warm-up file is valid: a failure here is a bug
        raise RuntimeError(f"the forkserver's warm-up file was refused: {parsed}")


try:
    warm_up()
except Exception:  # a preload that raises would stop the forkserver, and every check with it
    log.exception("the decoding forkserver's warm-up failed: each child sets up pyarrow itself")

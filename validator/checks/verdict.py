"""The outcome of checking one submission: accepted, or rejected with a reason code and evidence.

A verdict is what the validator records in Postgres and, when it rejects, sends on-chain: the
reason code travels as a right-padded bytes32 (`proofpool.infra.chain.bindings.reason_code`), so it is
checked here to be short ASCII snake_case at construction, where a typo is a bug in this package
and not a failed transaction later. The evidence is stored next to the verdict for auditors and
for the provider's dispute: the facts that made the decision, never the file itself.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from proofpool.core.rollout.schema import RolloutFileReason
from proofpool.inference.check import SampleReason

CheckReason = Literal[
    "missing",
    "hash_mismatch",
    "file_too_large",
    "too_many_row_groups",
    "metadata_mismatch",
    "spec_mismatch",
    "row_count",
    "token_out_of_range",
    "length_out_of_range",
    "temperature_mismatch",
    "model_version_mismatch",
    "stale_model_version",
    "unknown_model_version",
    "seed_mismatch",
    "seed_not_assigned",
    "group_layout",
    "problem_not_assigned",
    "duplicate_batch",
    "bad_problem_id",
    "prompt_mismatch",
    "reward_mismatch",
    "group_mismatch",
    "advantage_mismatch",
    "work_units_mismatch",
    "file_statistic",
    "tie_steering",
    # Bundles (`proofpool.validator.checks.bundle`): a training pool takes one file per submission.
    "bundle_not_allowed",
    # Training pools (`proofpool.validator.checks.update`): the file's metadata, its round, the replay.
    "wrong_pool",
    "wrong_node",
    "wrong_round",
    "wrong_spec",
    "wrong_base",
    "wrong_units",
    "loss_trace",
    "stale",
    "pseudo_gradient_mismatch",
    # The update file reader's (`proofpool.core.diloco.update_file`) that the rollout reader does not name.
    "not_safetensors",
    "wrong_tensors",
    "wrong_shape",
    "wrong_dtype",
    "table_not_finite",
    "values_not_finite",
    "wrong_codec",
]
"""Reasons the checks in this package name themselves (see docs/validator-checks.md)."""

Reason = CheckReason | RolloutFileReason | SampleReason
"""Every reason a verdict can carry: ours, the rollout file reader's, and the TOPLOC and sampling
checks' (`proofpool.inference.check`), which pass through unchanged."""

_REASON: Final = re.compile(r"[a-z][a-z0-9_]*")
MAX_REASON_BYTES: Final = 32
"""The reason goes on-chain as bytes32."""
MAX_TEXT: Final = 200
"""Characters kept of an untrusted string (a problem id, a parser message) quoted in evidence."""


@dataclass(frozen=True)
class Verdict:
    """The verdict on one submission.

    Raises ValueError on construction if `reason` does not fit the on-chain format or does not
    agree with `accepted` (a bug in the checks, never a property of the submitted file).
    """

    accepted: bool
    reason: Reason | None
    """First failing check's code, ASCII snake_case, at most 32 bytes; None if accepted."""
    evidence: dict[str, Any] = field(default_factory=dict)
    """JSON-serializable facts behind the verdict (strict JSON: no NaN or infinity)."""
    rows: int = 0
    """Rows in the file (0 if it could not be read)."""
    checked_rows: int = 0
    """Rows recomputed by TOPLOC and the sampling check (fewer when spot-checking, 0 when skipped)."""
    checked_tokens: int = 0
    """Completion tokens of the recomputed rows (for throughput figures)."""

    def __post_init__(self) -> None:
        if self.accepted != (self.reason is None):
            raise ValueError(f"accepted={self.accepted} with reason {self.reason!r}")
        if self.reason is not None and not (
            _REASON.fullmatch(self.reason) and len(self.reason.encode("ascii")) <= MAX_REASON_BYTES
        ):
            raise ValueError(f"reason code {self.reason!r} is not ASCII snake_case of at most 32 bytes")


def reject(reason: Reason, rows: int = 0, **evidence: Any) -> Verdict:
    """A rejection before any recomputation (checked rows and tokens are 0)."""
    return Verdict(accepted=False, reason=reason, evidence=json_safe(evidence), rows=rows)


def quote(text: str) -> str:
    """An untrusted string shortened for evidence: a hostile file must not bloat the verdict row."""
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + f"... ({len(text)} characters)"


def json_safe(value: Any) -> Any:
    """`value` with non-finite floats replaced by None and tuples by lists, so evidence is strict JSON.

    TOPLOC reports 2**64 (finite) for a chunk without exponent matches, but a sampling gap can be
    infinite; `json.dumps` would write `Infinity`, which PostgreSQL's jsonb refuses.
    """
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value

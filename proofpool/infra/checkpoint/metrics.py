"""The trainer's metrics file: a checkpoint's training figures, carried in the checkpoint itself.

A trainer publishing checkpoint `version` writes the figures of the step (GRPO) or outer round
(DiLoCo) that made it into `proofpool-metrics.json` beside the weights. The manifest lists it like
any other file, so its sha256 is covered by the manifest hash the chain records: the figures an
auditor reads are the ones the pool's manager anchored, and nobody can change them afterwards.
Workers and validators load the checkpoint as a model directory and ignore the file (vLLM and
transformers read only what they know; `worker.models.OWN_FILES` keeps it out of the comparison
that decides whether a new checkpoint is the same model).

The file is canonical JSON (sorted keys, no whitespace, ASCII), at most `MAX_METRICS_BYTES`:

    {"figures":{"loss":-0.0123,"mean_reward":0.4375,"samples":256},"pool_id":1,"schema_version":1,"version":3}

`figures` is a flat map of at most `MAX_FIGURES` names (lower-case snake_case) to finite numbers:
integers within +-2^53 (exact in any JSON reader) or floats. Parsing is as strict as the
manifest's: anything else is `CheckpointError("metrics_malformed")`, never another exception.
"""

from __future__ import annotations

import hashlib
import math
import numbers
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

from proofpool.infra.checkpoint.errors import CheckpointError, Reason
from proofpool.infra.checkpoint.manifest import MAX_POOL_ID, MAX_VERSION, canonical_bytes, strict_json

METRICS_NAME: Final = "proofpool-metrics.json"
"""File name of the metrics in a checkpoint, in the store and in local copies."""
METRICS_SCHEMA_VERSION: Final = 1
"""Bump when the file's shape or meaning changes; older readers then refuse it by name."""
MAX_METRICS_BYTES: Final = 16 * 1024
"""Largest metrics file written or read: 64 figures take under 5 KB."""
MAX_FIGURES: Final = 64
MAX_INT_FIGURE: Final = 2**53
"""Integers beyond this are not exact as JSON numbers in every reader (JavaScript's are doubles)."""

_FIGURE_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")
_KEYS: Final = frozenset({"schema_version", "pool_id", "version", "figures"})

Figure = int | float


def _malformed(detail: str) -> CheckpointError:
    return CheckpointError(Reason.METRICS_MALFORMED, detail)


def _check_figure(name: object, value: object) -> None:
    if not isinstance(name, str) or not _FIGURE_NAME.fullmatch(name):
        raise _malformed(f"figure name {name!r} is not lower-case snake_case of 1..64 characters")
    if type(value) is int:  # bool is an int subclass: refused below, as any other type
        if abs(value) > MAX_INT_FIGURE:
            raise _malformed(f"figure {name} = {value} is beyond +-2^53")
    elif type(value) is float:
        if not math.isfinite(value):
            raise _malformed(f"figure {name} = {value} is not finite")
    else:
        raise _malformed(f"figure {name} must be a number, not {value!r}")


@dataclass(frozen=True)
class CheckpointMetrics:
    """The figures of checkpoint `version` of pool `pool_id` (read-only once made)."""

    pool_id: int
    version: int
    figures: Mapping[str, Figure]
    schema_version: int = field(default=METRICS_SCHEMA_VERSION)

    def __post_init__(self) -> None:
        for name, value, high in (("pool_id", self.pool_id, MAX_POOL_ID), ("version", self.version, MAX_VERSION)):
            if type(value) is not int or not 0 <= value <= high:
                raise _malformed(f"{name} must be an integer in 0..{high}, not {value!r}")
        if self.schema_version != METRICS_SCHEMA_VERSION:
            raise _malformed(f"schema_version {self.schema_version!r}; this proofpool reads {METRICS_SCHEMA_VERSION}")
        if not isinstance(self.figures, Mapping):
            raise _malformed(f"figures must be a map of names to numbers, not {type(self.figures).__name__}")
        if len(self.figures) > MAX_FIGURES:
            raise _malformed(f"{len(self.figures)} figures, over the limit of {MAX_FIGURES}")
        for name, value in self.figures.items():
            _check_figure(name, value)
        object.__setattr__(self, "figures", MappingProxyType(dict(sorted(self.figures.items()))))
        if len(self.to_bytes()) > MAX_METRICS_BYTES:
            raise _malformed(f"{len(self.to_bytes())} bytes, over the limit of {MAX_METRICS_BYTES}")

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "pool_id": self.pool_id,
            "version": self.version,
            "figures": dict(self.figures),
        }

    def to_bytes(self) -> bytes:
        """The canonical JSON bytes: what is written, listed in the manifest and hashed."""
        return canonical_bytes(self.to_json())

    def sha256_hex(self) -> str:
        return hashlib.sha256(self.to_bytes()).hexdigest()


def parse_metrics(raw: bytes) -> CheckpointMetrics:
    """The metrics in `raw`; `CheckpointError("metrics_malformed")` for anything but a well-formed
    metrics file of a known schema, never another exception."""
    data = strict_json(raw, "metrics", MAX_METRICS_BYTES, _malformed)
    if not isinstance(data, dict):
        raise _malformed(f"top level must be an object, not {type(data).__name__}")
    missing, extra = _KEYS - data.keys(), data.keys() - _KEYS
    if missing or extra:
        raise _malformed(f"missing keys {sorted(missing)}, unknown keys {sorted(extra)}")
    if not isinstance(data["figures"], dict):
        raise _malformed(f"figures must be an object, not {type(data['figures']).__name__}")
    return CheckpointMetrics(
        pool_id=data["pool_id"],
        version=data["version"],
        figures=data["figures"],
        schema_version=data["schema_version"],
    )


def publishable_figures(values: Mapping[str, object]) -> dict[str, Figure]:
    """The figures among a trainer's step values that a metrics file can carry: finite floats and
    integers within +-2^53 under a valid name. A non-finite loss (a step whose optimizer update was
    skipped), booleans and anything else are left out, so the file says "unknown" rather than lie."""
    out: dict[str, Figure] = {}
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            continue
        number = int(value) if isinstance(value, numbers.Integral) else float(value)  # numpy, torch scalars
        try:
            _check_figure(name, number)
        except CheckpointError:
            continue
        out[name] = number
    return out

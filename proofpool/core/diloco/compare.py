"""A pseudo-gradient file against a validator's replay of the same inner steps.

The replay starts from the same checkpoint, rows and hyperparameters, so an honest file differs
from it only by quantization and by floating-point drift between machines (kernels, thread
counts). Both are compared on dequantized values, by the relative L2 distance over the whole
pseudo-gradient, against the spec's tolerance: comparing codes would be both too strict (drift
moves elements across bin edges) and too weak (codes are invariant to scaling a tensor, so a file
whose tables were multiplied by 10 keeps every code). When the re-quantized replay equals the
file's codes and tables bit for bit (same hardware and libraries), that settles it at once.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from proofpool.core.diloco.codec import Quantized, quantize
from proofpool.core.diloco.stats import sum_float64
from proofpool.core.diloco.update_file import Update
from proofpool.core.spec import canonical_json


def relative_l2(a: Mapping[str, torch.Tensor], b: Mapping[str, torch.Tensor]) -> float:
    """||a - b|| / ||b|| over every parameter, in float64; when b is zero: 0.0 if a is too, else inf."""
    if set(a) != set(b):
        raise ValueError(f"different parameters: {sorted(set(a) ^ set(b))[:3]}")
    for name in a:
        if a[name].shape != b[name].shape:
            raise ValueError(f"{name} has shapes {tuple(a[name].shape)} and {tuple(b[name].shape)}")
    diff = math.fsum(sum_float64((a[k].double() - b[k].double()).square()) for k in sorted(a))
    base = math.fsum(sum_float64(b[k].double().square()) for k in sorted(b))
    if base == 0:
        return 0.0 if diff == 0 else math.inf
    return math.sqrt(diff / base)


def tensors_sha256(t: Mapping[str, torch.Tensor]) -> str:
    """A digest of named float32 values (hex): per name, sorted, the canonical JSON of
    [name, shape] then the values as float32 little-endian bytes."""
    digest = hashlib.sha256()
    for name in sorted(t):
        value = t[name].detach().to("cpu", torch.float32).contiguous()
        digest.update(canonical_json([name, list(value.shape)]))
        digest.update(value.numpy().astype("<f4", copy=False).tobytes())
    return digest.hexdigest()


@dataclass(frozen=True)
class Comparison:
    relative_l2: float
    """Between the file's dequantized values and the fp32 replay."""
    bitwise: bool
    """The re-quantized replay equals the file's codes and tables (fp32 files: its values) exactly."""
    replay_sha256: str
    """`tensors_sha256` of the replay: evidence anyone can recompute."""
    within: bool
    """bitwise, or relative_l2 <= the tolerance."""


def compare_update(update: Update, replay: Mapping[str, torch.Tensor], tolerance: float) -> Comparison:
    """The file against the replay's fp32 pseudo-gradient. The file was read with the model's
    shapes (`read_update(data, shapes)`), so both have the same names and shapes (else ValueError:
    a bug of the caller, not the member's fault)."""
    values = update.dequantized()
    distance = relative_l2(values, replay)
    if update.meta.codec == "fp32":
        bitwise = all(torch.equal(values[k], replay[k].detach().to("cpu", torch.float32)) for k in values)
    else:
        bitwise = all(_requantizes_to(replay[k], update.quantized[k]) for k in values)
    return Comparison(distance, bitwise, tensors_sha256(replay), bitwise or distance <= tolerance)


def _requantizes_to(replay: torch.Tensor, q: Quantized) -> bool:
    """The replay quantizes to exactly `q` (never, when it is not finite: a file cannot be)."""
    try:
        mine = quantize(replay, q.block_size)
    except ValueError:
        return False
    return torch.equal(mine.codes, q.codes) and torch.equal(mine.table, q.table)

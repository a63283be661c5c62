"""PRIME-style uniform 8-bit quantization of pseudo-gradients, with lookup tables.

INTELLECT-1 sends its pseudo-gradients as int8 (a quarter of fp32's bytes) and reported no loss
from it. Each block of a tensor (the whole tensor, or `block_size` elements) is cut into 256
equal bins between its min and max; an element's code is its bin, and the block's lookup table
holds, for each code, the mean of the elements that got it (the bin's value when none did). The
mean rather than the bin centre keeps the dequantized block's mean exact up to rounding.

Deterministic on CPU, bit for bit: the codes come from float32 element-wise arithmetic, and the
table sums run in float64 in element order (`bincount`) before the cast to float32. So a
validator that re-quantizes a replay equal to the member's pseudo-gradient gets the same bytes
(the fast path). It cannot require that in general: a replay a hair away from the member's can
land an element in the next bin, and scaling a tensor leaves its codes unchanged while its
values change, so the codes alone prove nothing; replay is judged on dequantized values
(`proofpool.core.diloco.compare`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

LEVELS = 256


@dataclass(frozen=True)
class Quantized:
    codes: torch.Tensor
    """uint8, the input's shape."""
    table: torch.Tensor
    """float32 [blocks, 256]: code c of block b dequantizes to table[b, c]."""
    block_size: int = 0
    """The elements per block (0: the whole tensor is one block); the last block may be short.
    Needed to dequantize: several block sizes give the same number of blocks."""


def blocks_of(numel: int, block_size: int) -> int:
    """How many blocks (lookup tables) a tensor of `numel` elements has."""
    if numel < 0 or block_size < 0:
        raise ValueError(f"no blocks for {numel} elements in blocks of {block_size}")
    if numel == 0:
        return 0
    return 1 if block_size == 0 else -(-numel // block_size)


def quantize(t: torch.Tensor, block_size: int = 0) -> Quantized:
    """The codes and lookup tables of `t` (any float dtype or device; computed on CPU in float32).

    ValueError for non-finite values, or a block whose range float32 cannot hold."""
    x = t.detach().to(device="cpu", dtype=torch.float32).reshape(-1)
    n, blocks = x.numel(), blocks_of(t.numel(), block_size)
    if n == 0:
        return Quantized(torch.zeros(t.shape, dtype=torch.uint8), torch.zeros(0, LEVELS), block_size)
    if not bool(torch.isfinite(x).all()):
        raise ValueError("cannot quantize non-finite values")
    size = min(block_size, n) if block_size else n
    # Pad the last block with its own last element: min and max stay those of its real elements.
    rows = torch.cat([x, x[-1:].expand(blocks * size - n)]).view(blocks, size)
    lo, hi = rows.amin(dim=1), rows.amax(dim=1)
    span = hi - lo
    if not bool(torch.isfinite(span).all()):
        raise ValueError("cannot quantize: a block's range overflows float32")
    scale = span / (LEVELS - 1)
    flat = scale > 0
    q = (rows - lo[:, None]) / torch.where(flat, scale, 1.0)[:, None]
    codes = torch.where(flat[:, None], q.round().clamp(0, LEVELS - 1), 0.0).to(torch.uint8)
    index = (torch.arange(blocks)[:, None] * LEVELS + codes.long()).reshape(-1)[:n]
    sums = torch.bincount(index, weights=x.double(), minlength=blocks * LEVELS).view(blocks, LEVELS)
    counts = torch.bincount(index, minlength=blocks * LEVELS).view(blocks, LEVELS)
    bins = lo[:, None] + torch.arange(LEVELS, dtype=torch.float32)[None, :] * scale[:, None]
    table = torch.where(counts > 0, (sums / counts.clamp(min=1)).to(torch.float32), bins)
    return Quantized(codes.reshape(-1)[:n].reshape(t.shape), table, block_size)


def dequantize(q: Quantized) -> torch.Tensor:
    """float32 values of the codes, in their shape."""
    n = q.codes.numel()
    blocks = blocks_of(n, q.block_size)
    if q.table.shape != (blocks, LEVELS):
        raise ValueError(f"a table of shape {tuple(q.table.shape)} does not fit {blocks} blocks of {LEVELS} codes")
    block = torch.arange(n) // (q.block_size or max(n, 1))
    return q.table.reshape(-1)[block * LEVELS + q.codes.reshape(-1).long()].reshape(q.codes.shape)

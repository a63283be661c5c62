"""Seeded Gumbel-max sampling: the worker's sampler and the validator's reference for it.

Sampling token i of a completion is `argmax(logits / T + g)` where g is standard Gumbel noise
fixed by (sampling_seed, sample_index, position, token id). Given the same logits, anyone can
therefore recompute which token had to be chosen, whatever the batch it was generated in.

The noise is counter-based, so no generator state exists (protocol constants, do not change):

    step(z)     = fmix64(z + GOLDEN)            # one splitmix64 output (fmix64 below)
    row_key     = step(step(step(seed) ^ sample_index) ^ position)
    bits(token) = step(row_key + token * GOLDEN)  # the (token+1)-th splitmix64 output from row_key
    u           = ((bits >> 12) + 0.5) / 2**52   # 52 bits, strictly inside (0, 1)
    g           = -log(-log(u))                  # float64, then rounded to float32

All integer steps are mod 2**64 and bit-exact on every machine. Only 52 bits feed u (not 53):
(k + 0.5) / 2**52 is exact in float64 for every 52-bit k, whereas a 53-bit k + 0.5 rounds the top
value to u = 1 and g = inf. The two logs come from the platform's float64 libm and may differ in
the last ulp between CPUs; after rounding to float32 that almost never shows, and the verifier's
tie tolerance absorbs it when it does.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

import torch

_U64: Final = (1 << 64) - 1
GOLDEN: Final = 0x9E3779B97F4A7C15
"""splitmix64's increment (2**64 / golden ratio)."""
_MIX1: Final = 0xBF58476D1CE4E5B9
_MIX2: Final = 0x94D049BB133111EB
_BLOCK_ELEMENTS: Final = 1 << 20
"""Elements per block of noise: ~8 MB int64 buffers stay in cache, which is ~10x faster than
hashing a whole [256, 152000] matrix at once on a 2-core CPU."""


def _signed(value: int) -> int:
    """The int64 with the same 64 bits as the uint64 `value` (torch has no usable uint64 ops)."""
    value &= _U64
    return value - (1 << 64) if value >= 1 << 63 else value


def _shr_into(z: torch.Tensor, shift: int, out: torch.Tensor) -> torch.Tensor:
    """Logical right shift of int64 bit patterns into `out` (torch's `>>` is arithmetic)."""
    torch.bitwise_right_shift(z, shift, out=out)
    return out.bitwise_and_((1 << (64 - shift)) - 1)


def _fmix64_(z: torch.Tensor, scratch: torch.Tensor) -> torch.Tensor:
    """splitmix64's finalizer, in place on int64 bit patterns (multiplication wraps mod 2**64).

    In-place with a caller-owned scratch buffer: fresh 8 MB temporaries per operation cost more in
    page faults than the arithmetic itself.
    """
    z.bitwise_xor_(_shr_into(z, 30, scratch)).mul_(_signed(_MIX1))
    z.bitwise_xor_(_shr_into(z, 27, scratch)).mul_(_signed(_MIX2))
    return z.bitwise_xor_(_shr_into(z, 31, scratch))


def _step_(z: torch.Tensor, scratch: torch.Tensor | None = None) -> torch.Tensor:
    """One splitmix64 output from state z, in place."""
    z.add_(_signed(GOLDEN))
    return _fmix64_(z, torch.empty_like(z) if scratch is None else scratch)


def _row_keys(seed: int, sample_index: int, positions: torch.Tensor) -> torch.Tensor:
    """int64 [n]: the per-(seed, sample, position) stream keys."""
    if not 0 <= seed <= _U64:
        raise ValueError(f"seed must be a uint64, got {seed}")
    if sample_index < 0:
        raise ValueError(f"sample_index must be >= 0, got {sample_index}")
    pos = torch.as_tensor(positions, dtype=torch.int64).reshape(-1).cpu()
    if pos.numel() and int(pos.min()) < 0:
        raise ValueError("positions must be >= 0")
    key = _step_(torch.tensor([_signed(seed)], dtype=torch.int64))
    key ^= _signed(sample_index)
    key = _step_(key)
    keys = pos ^ key
    return _step_(keys)


def _noise_blocks(
    seed: int, sample_index: int, positions: torch.Tensor, vocab_size: int
) -> Iterator[tuple[int, torch.Tensor]]:
    """Yield (first row, float32 [rows, vocab] noise) in cache-sized blocks of rows."""
    if vocab_size < 1:
        raise ValueError(f"vocab_size must be >= 1, got {vocab_size}")
    keys = _row_keys(seed, sample_index, positions)
    offsets = torch.arange(vocab_size, dtype=torch.int64).mul_(_signed(GOLDEN))  # wraps mod 2**64
    block = max(1, min(keys.numel(), _BLOCK_ELEMENTS // vocab_size))
    z = torch.empty(block, vocab_size, dtype=torch.int64)
    scratch = torch.empty_like(z)
    u = torch.empty(block, vocab_size, dtype=torch.float64)
    for start in range(0, keys.numel(), block):
        rows = min(block, keys.numel() - start)
        zb, sb, ub = z[:rows], scratch[:rows], u[:rows]
        torch.add(keys[start : start + rows, None], offsets[None, :], out=zb)
        _step_(zb, sb)
        ub.copy_(_shr_into(zb, 12, sb)).add_(0.5).mul_(2.0**-52)
        yield start, ub.log_().neg_().log_().neg_().to(torch.float32)


def gumbel_noise(seed: int, sample_index: int, positions: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """float32 [len(positions), vocab_size]: deterministic standard Gumbel noise from a counter-based
    hash of (seed uint64, sample_index, position, token id); identical on every machine and in every
    batch composition.

    `position` is the 0-based index of the token within the completion; `sample_index` is the
    row index of the sample within its rollout file.
    """
    n = torch.as_tensor(positions).numel()
    out = torch.empty(n, vocab_size, dtype=torch.float32)
    for start, noise in _noise_blocks(seed, sample_index, positions, vocab_size):
        out[start : start + noise.shape[0]] = noise
    return out


def score_blocks(
    logits: torch.Tensor, temperature: float, seed: int, sample_index: int, positions: torch.Tensor
) -> Iterator[tuple[int, torch.Tensor]]:
    """Yield (first row, float32 [rows, vocab] perturbed scores) block by block, so a verifier can
    reduce a long completion without holding all its noise at once."""
    if logits.dim() != 2:
        raise ValueError(f"logits must be 2-D [n, vocab], got shape {tuple(logits.shape)}")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    n = torch.as_tensor(positions).numel()
    if n != logits.shape[0]:
        raise ValueError(f"{logits.shape[0]} rows of logits but {n} positions")
    base = logits.detach().to(device="cpu", dtype=torch.float32)
    if temperature == 0:
        yield 0, base  # greedy: no noise
        return
    for start, noise in _noise_blocks(seed, sample_index, positions, logits.shape[1]):
        yield start, base[start : start + noise.shape[0]] / temperature + noise


def scores(
    logits: torch.Tensor, temperature: float, seed: int, sample_index: int, positions: torch.Tensor
) -> torch.Tensor:
    """float32 [n, vocab]: the perturbed scores `logits.float() / temperature + gumbel_noise(...)`
    whose argmax is the sampled token (`logits.float()` itself when temperature == 0)."""
    out = torch.empty(logits.shape[0], logits.shape[1], dtype=torch.float32)
    for start, block in score_blocks(logits, temperature, seed, sample_index, positions):
        out[start : start + block.shape[0]] = block
    return out


def sample_tokens(
    logits: torch.Tensor, temperature: float, seed: int, sample_index: int, positions: torch.Tensor
) -> torch.Tensor:
    """int64 [n]: argmax(logits.float() / temperature + gumbel_noise(...)) per row; temperature == 0
    means plain argmax."""
    out = torch.empty(logits.shape[0], dtype=torch.int64)
    for start, block in score_blocks(logits, temperature, seed, sample_index, positions):
        out[start : start + block.shape[0]] = block.argmax(dim=1)
    return out

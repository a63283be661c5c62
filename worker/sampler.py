"""The worker's seeded Gumbel-max sampler, as a vLLM v1 logits processor.

Validators check that every committed token is what `proofpool.core.sampling.gumbel.sample_tokens`
picks from their own recomputed logits, for the sample's (sampling_seed, sample_index,
position, temperature). The worker must therefore choose tokens with exactly that function,
not with vLLM's sampler: this processor computes the chosen token per row from vLLM's raw
logits and masks every other logit to -inf, so whatever vLLM does next (the engine runs it
greedy) the forced token comes out.

Per-request settings travel in `SamplingParams.extra_args[EXTRA_ARGS_KEY]` (see
`sampler_extra_args`); requests without them are left alone. The position of the next token is
the length of the request's live output-token list, which vLLM hands over when the request
joins the batch and keeps appending to.

This module is imported by vLLM's engine (it is passed as a class in
`LLM(logits_processors=[...])`); it imports vLLM's interface only, never the engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import torch
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor, MoveDirectionality

from proofpool.core.sampling import gumbel_kernel
from proofpool.core.sampling.gumbel import sample_tokens

if TYPE_CHECKING:
    from vllm import SamplingParams
    from vllm.config import VllmConfig

EXTRA_ARGS_KEY: Final = "proofpool"
"""Key of our settings in `SamplingParams.extra_args`."""


@dataclass(frozen=True)
class SamplerSettings:
    """What fixes one sample's tokens: its seed, its row in the rollout file and the temperature."""

    seed: int
    sample_index: int
    temperature: float
    """Rounded to float32 on construction: the rollout file stores a float32, and the validator
    must divide by exactly the value the worker divided by."""

    def __post_init__(self) -> None:
        if not 0 <= self.seed < 2**64:
            raise ValueError(f"seed must be a uint64, got {self.seed}")
        if self.sample_index < 0:
            raise ValueError(f"sample_index must be >= 0, got {self.sample_index}")
        if not self.temperature >= 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        object.__setattr__(self, "temperature", float(np.float32(self.temperature)))


def sampler_extra_args(settings: SamplerSettings, **extra: Any) -> dict[str, Any]:
    """The `SamplingParams.extra_args` that make this processor sample with `settings`.

    `extra` entries ride along under the same key (the engine tags requests with its own key).
    """
    return {
        EXTRA_ARGS_KEY: {
            "seed": settings.seed,
            "sample_index": settings.sample_index,
            "temperature": settings.temperature,
            **extra,
        }
    }


def read_settings(extra_args: Mapping[str, Any] | None) -> SamplerSettings | None:
    """Our settings from a request's `extra_args`, or None if it carries none."""
    ours = (extra_args or {}).get(EXTRA_ARGS_KEY)
    if ours is None:
        return None
    return SamplerSettings(
        seed=int(ours["seed"]), sample_index=int(ours["sample_index"]), temperature=float(ours["temperature"])
    )


@dataclass
class _Row:
    settings: SamplerSettings
    output_tokens: list[int]
    """vLLM's live list of the request's generated tokens; its length is the next position."""


class GumbelMaxLogitsProcessor(LogitsProcessor):
    """Forces, per request, the token the seeded Gumbel-max sampler picks from the raw logits."""

    def __init__(self, vllm_config: VllmConfig, device: torch.device, is_pin_memory: bool) -> None:
        self._rows: dict[int, _Row] = {}  # persistent-batch index -> row state
        # The sampler's numba kernels, compiled (or loaded from their cache) while the engine
        # starts, not in the first decode step of the first batch.
        gumbel_kernel.warm_up()

    @classmethod
    def validate_params(cls, sampling_params: SamplingParams) -> None:
        """Reject malformed settings when the request is submitted, not mid-batch."""
        read_settings(sampling_params.extra_args)

    def is_argmax_invariant(self) -> bool:
        """False: forcing a token changes the argmax, so vLLM must run us before greedy sampling."""
        return False

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        """Follow the persistent batch: removals, then additions, then moves (vLLM's order)."""
        if batch_update is None:
            return
        for index in batch_update.removed:
            self._rows.pop(index, None)
        for index, params, _prompt, output_tokens in batch_update.added:
            settings = read_settings(params.extra_args)
            if settings is None:
                self._rows.pop(index, None)
            else:
                self._rows[index] = _Row(settings, output_tokens)
        for a, b, direction in batch_update.moved:
            row_a = self._rows.pop(a, None)
            row_b = self._rows.pop(b, None)
            if row_a is not None:
                self._rows[b] = row_a
            if direction == MoveDirectionality.SWAP and row_b is not None:
                self._rows[a] = row_b

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        """Mask each of our rows of `logits` [batch, vocab] to the one token the sampler chooses."""
        if not self._rows:
            return logits
        indices = sorted(i for i in self._rows if i < logits.shape[0])
        chosen = torch.empty(len(indices), dtype=torch.int64)
        for k, index in enumerate(indices):
            row = self._rows[index]
            position = torch.tensor([len(row.output_tokens)], dtype=torch.int64)
            s = row.settings
            chosen[k] = sample_tokens(logits[index : index + 1], s.temperature, s.seed, s.sample_index, position)[0]
        rows = torch.tensor(indices, dtype=torch.int64, device=logits.device)
        chosen = chosen.to(logits.device)
        logits[rows] = float("-inf")
        logits[rows, chosen] = 0.0
        return logits

"""Judge one rollout sample: its TOPLOC proofs, then its sampling, against a recomputation.

The two checks cover each other's blind spots. TOPLOC says the committed activations are the
model's on these tokens (catches another model, a perturbed model, a changed prompt, foreign
or broken proofs) but not that the tokens were sampled from the model; the sampling check says
each token is what the seeded sampler picks from the recomputed logits (catches tokens from a
cheap model proven afterwards with the right one, edited tokens, a false temperature or seed).
TOPLOC runs first, so a sample that fails both reports the TOPLOC reason, in the order the
validator lists its checks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from proofpool.inference.prefill import Recomputation, prefill_batch
from proofpool.sampling.verify import DEFAULT_TIE_TOLERANCE, SamplingCheck, SamplingReason, sampling_verdict, verify
from proofpool.toploc import ChunkCheck, toploc_verdict, verify_proof_blob
from proofpool.toploc.verify import ToplocReason

if TYPE_CHECKING:
    from transformers import LlamaForCausalLM

    from proofpool.rollout import RolloutSample

SampleReason = ToplocReason | SamplingReason


@dataclass(frozen=True)
class SampleVerdict:
    """The verdict on one sample, with the evidence behind it."""

    accepted: bool
    reason: SampleReason | None
    """First failing rule (TOPLOC rules, then sampling rules); None when accepted."""
    toploc: tuple[ChunkCheck, ...]
    sampling: SamplingCheck


def check_sample(
    recomputed: Recomputation,
    completion_tokens: Sequence[int],
    proofs: object,
    *,
    temperature: float,
    sampling_seed: int,
    sample_index: int,
    eos_token_id: int,
    max_tokens: int,
    tie_tolerance: float = DEFAULT_TIE_TOLERANCE,
) -> SampleVerdict:
    """TOPLOC + sampling verdict for one sample, given the verifier's recomputation of it.

    `proofs` is the rollout row's concatenated proof blob, taken as untrusted: any value is
    judged, never raised on. `sample_index` is the row's index in its rollout file.
    """
    chunks = tuple(verify_proof_blob(recomputed.hidden_states, proofs))
    toploc_ok, toploc_reason = toploc_verdict(chunks)
    sampling = verify(
        recomputed.logits,
        completion_tokens,
        temperature,
        sampling_seed,
        sample_index,
        eos_token_id,
        max_tokens,
        tie_tolerance=tie_tolerance,
    )
    sampling_ok, sampling_reason = sampling_verdict(sampling)
    reason: SampleReason | None = toploc_reason if not toploc_ok else sampling_reason
    return SampleVerdict(accepted=toploc_ok and sampling_ok, reason=reason, toploc=chunks, sampling=sampling)


def check_samples(
    model: LlamaForCausalLM,
    samples: Sequence[RolloutSample],
    *,
    eos_token_id: int,
    max_tokens: int,
    tie_tolerance: float = DEFAULT_TIE_TOLERANCE,
) -> list[SampleVerdict]:
    """`check_sample` for every row of a rollout file (row i has sample index i), one batched prefill.

    Rows are expected to have passed the schema and bounds checks (token ids within the
    vocabulary, lengths within limits); out-of-vocabulary ids raise ValueError here.
    """
    recomputed = prefill_batch(model, [(s.prompt_tokens, s.completion_tokens) for s in samples])
    return [
        check_sample(
            rec,
            s.completion_tokens,
            s.proofs,
            temperature=s.temperature,
            sampling_seed=s.sampling_seed,
            sample_index=index,
            eos_token_id=eos_token_id,
            max_tokens=max_tokens,
            tie_tolerance=tie_tolerance,
        )
        for index, (s, rec) in enumerate(zip(samples, recomputed, strict=True))
    ]

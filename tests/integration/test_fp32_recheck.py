"""A bf16 validator's own rounding never decides a slash: rows it rejects for their sampling alone
are judged again on a float32 recomputation (`proofpool.inference.check.recheck_in_fp32`).

The rows' tokens are sampled from float32 logits and proven with bf16 activations (a tiny Qwen3
with a trained BPE tokenizer, built offline, its output projection scaled so logits run to tens of
units as a trained model's do), and the tie tolerance is cut to almost nothing: the bf16
recomputation's rounding flips some near-ties beyond it while float32 reproduces every token. An
edited token is rejected in both.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from proofpool.devnet.tiny_model import build_tiny_qwen3

from proofpool.core.rollout import RolloutSample
from proofpool.core.sampling import sample_tokens
from proofpool.core.toploc import build_proofs_batch, join_proofs
from proofpool.inference.check import check_recomputed, check_samples
from proofpool.inference.model import load_model
from proofpool.inference.prefill import prefill_batch

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

ROWS, TOKENS, SEED, TEMPERATURE = 48, 16, 11, 1.0
TOLERANCE = 1e-3
"""Far below bf16's rounding of these logits, above float32's batch-to-batch differences."""
LOGIT_SCALE = 100.0


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, torch.nn.Module]:
    path: Path = build_tiny_qwen3(tmp_path_factory.mktemp("tiny-qwen3"))
    # Random weights give logits near 0, where bf16 rounds finely; a trained model's run to tens of units.
    model = load_model(path, "fp32")
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(LOGIT_SCALE)
    # Saved in bf16 as the engines run it: float32 then computes with exactly the worker's weights.
    model.to(torch.bfloat16).save_pretrained(path)
    return {"fp32": load_model(path, "fp32"), "bf16": load_model(path, "bf16")}


def _rows(model: torch.nn.Module, prover: torch.nn.Module, stop: int) -> list[RolloutSample]:
    """Seeded Gumbel-max completions of `model` (row i, sample index i), cut at the first stop id,
    proven with `prover`'s final-norm states (a bf16 engine commits bf16 activations)."""
    generator = torch.Generator().manual_seed(SEED)
    vocab = int(model.config.vocab_size)
    prompts = [torch.randint(3, vocab, (6,), generator=generator).tolist() for _ in range(ROWS)]
    completions: list[list[int]] = [[] for _ in prompts]
    with torch.inference_mode():
        for position in range(TOKENS):
            for i, prompt in enumerate(prompts):
                if completions[i] and completions[i][-1] == stop:
                    continue
                logits = model(input_ids=torch.tensor([[*prompt, *completions[i]]])).logits[0, -1:].float()
                completions[i].append(int(sample_tokens(logits, TEMPERATURE, SEED, i, torch.tensor([position]))[0]))
    states = prefill_batch(prover, list(zip(prompts, completions, strict=True)))
    proofs = build_proofs_batch([s.hidden_states for s in states])
    return [
        RolloutSample(str(i), i, tuple(p), tuple(c), 0.0, 0.0, SEED, TEMPERATURE, 0, join_proofs(proof))
        for i, (p, c, proof) in enumerate(zip(prompts, completions, proofs, strict=True))
    ]


def test_rows_the_bf16_recompute_rejects_for_sampling_are_accepted_on_fp32(models: dict) -> None:
    stop = int(models["fp32"].config.eos_token_id)
    rows = _rows(models["fp32"], models["bf16"], stop)
    limits = {"stop_ids": {stop}, "max_tokens": TOKENS, "tie_tolerance": TOLERANCE}
    recomputed = prefill_batch(models["bf16"], [(r.prompt_tokens, r.completion_tokens) for r in rows])
    first_pass = check_recomputed(rows, recomputed, list(range(ROWS)), **limits)
    flipped = {v.row for v in first_pass if v.reason == "sampling_mismatch"}
    assert flipped, "bf16 rounding flipped no near-tie: the test lost its subject"
    assert all(v.accepted for v in first_pass if v.row not in flipped), [
        (v.row, v.reason, [(c.exp_mismatches, c.mant_err_mean) for c in v.toploc]) for v in first_pass if not v.accepted
    ]

    verdicts = check_samples(models["bf16"], rows, **limits)
    assert all(v.accepted for v in verdicts), [
        (v.row, v.reason, v.sampling.max_gap, [c.exp_mismatches for c in v.toploc]) for v in verdicts if not v.accepted
    ]
    assert {v.row for v in verdicts if v.rechecked} == flipped


def test_an_edited_token_is_rejected_in_both_precisions(models: dict) -> None:
    stop = int(models["fp32"].config.eos_token_id)
    rows = _rows(models["fp32"], models["bf16"], stop)
    target = next(i for i, r in enumerate(rows) if len(r.completion_tokens) > 2)
    tokens = list(rows[target].completion_tokens)
    tokens[1] = 3 if tokens[1] != 3 else 4  # a token the sampler did not choose
    # Re-proven on the edited tokens: TOPLOC passes, only the sampling check can see the edit.
    states = prefill_batch(models["bf16"], [(rows[target].prompt_tokens, tokens)])[0].hidden_states
    proof = join_proofs(build_proofs_batch([states])[0])
    rows[target] = dataclasses.replace(rows[target], completion_tokens=tuple(tokens), proofs=proof)
    verdicts = check_samples(models["bf16"], rows, stop_ids={stop}, max_tokens=TOKENS)
    edited = next(v for v in verdicts if v.row == target)
    assert edited.reason == "sampling_mismatch" and not edited.rechecked
    assert edited.sampling.first_mismatch == 1

"""Supervised warm-up of the devnet policy on the arithmetic task.

A randomly initialized policy almost never answers correctly, so GRPO would see groups whose
rewards are all zero and learn nothing. A short supervised run on generated problems puts the
policy where RL has signal: clearly better than random, clearly short of perfect, so the
devnet's reward curve has room to rise.

The run is a pure function of (model spec, warm-up settings): it always starts from the seeded
initial weights, draws its data from `WarmupSpec.data_seed` and never touches global RNG
state, which is what lets `proofpool_arithmetic.cache` address warmed models by a hash of those
settings. Accuracy is measured exactly, without sampling: teacher forcing gives the probability
that a sample at T=1 is exactly right, and whether greedy decoding would be.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from proofpool.core.environment import Progress
from proofpool.inference.model import ModelNotFound
from proofpool_arithmetic.build import ModelManifest, create_model, read_manifest, save_model
from proofpool_arithmetic.task import Problem, generate_problems
from proofpool_arithmetic.tokenizer import EOS_ID, PAD_ID, encode_text

if TYPE_CHECKING:
    import torch
    from transformers import LlamaForCausalLM

IGNORE_INDEX = -100
"""Label of positions that carry no loss (prompt and padding), as transformers expects."""


@dataclass(frozen=True)
class WarmupSpec:
    """Settings of the supervised warm-up; together with the model spec they fix the result."""

    steps: int = 640
    """Optimizer steps. The devnet default stops early on purpose (see module docstring)."""
    batch_size: int = 64
    """Problems per step."""
    lr: float = 2e-3
    """AdamW learning rate after a linear warm-up over the first 10% of the steps."""
    weight_decay: float = 0.01
    """AdamW weight decay."""
    data_seed: int = 1
    """Seed of the training problems (the evaluation set uses a different, fixed seed)."""

    def __post_init__(self) -> None:
        if self.steps < 0 or self.batch_size < 1 or self.lr <= 0:
            raise ValueError(f"invalid warm-up settings: {self}")


EVAL_SEED = 987_654_321
EVAL_PROBLEMS = 512


@dataclass(frozen=True)
class Accuracy:
    """Exact accuracy figures of a policy on a problem set."""

    sampled: float
    """Mean probability that one sample at temperature 1 is exactly the answer then `<eos>`."""
    greedy: float
    """Fraction of problems greedy decoding answers exactly."""


def encode_examples(problems: Sequence[Problem]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded `input_ids` [batch, len] and `labels` [batch, len] for teacher forcing.

    Each example is `<bos> a+b= answer <eos>`; only the answer and `<eos>` carry loss, since the
    policy is only ever asked to complete a prompt.
    """
    import torch

    rows: list[tuple[list[int], list[int]]] = []
    for problem in problems:
        prompt = problem.prompt_tokens()
        completion = [*encode_text(problem.target), EOS_ID]
        rows.append((prompt + completion, [IGNORE_INDEX] * len(prompt) + completion))
    width = max(len(ids) for ids, _ in rows)
    input_ids = torch.full((len(rows), width), PAD_ID, dtype=torch.long)
    labels = torch.full((len(rows), width), IGNORE_INDEX, dtype=torch.long)
    for i, (ids, lab) in enumerate(rows):
        input_ids[i, : len(ids)] = torch.tensor(ids)
        labels[i, : len(lab)] = torch.tensor(lab)
    return input_ids, labels


def _token_logprobs(model: LlamaForCausalLM, input_ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Log-probabilities [batch, len-1] of each label under the model (0 where unlabelled)."""
    import torch

    logits = model(input_ids=input_ids).logits[:, :-1].float()  # [batch, len-1, vocab]
    targets = labels[:, 1:]
    mask = targets != IGNORE_INDEX
    logprobs = torch.log_softmax(logits, dim=-1).gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return torch.where(mask, logprobs, torch.zeros_like(logprobs))


def evaluate(model: LlamaForCausalLM, problems: Sequence[Problem]) -> Accuracy:
    """Exact sampled (T=1) and greedy accuracy of `model` on `problems`, by teacher forcing."""
    import torch

    input_ids, labels = encode_examples(problems)
    with torch.no_grad():
        logits = model(input_ids=input_ids).logits[:, :-1].float()
    targets = labels[:, 1:]
    mask = targets != IGNORE_INDEX
    logprobs = torch.log_softmax(logits, dim=-1).gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    sampled = torch.where(mask, logprobs, torch.zeros_like(logprobs)).sum(dim=1).exp().mean()
    greedy_hits = (logits.argmax(dim=-1) == targets) | ~mask
    return Accuracy(sampled=float(sampled), greedy=float(greedy_hits.all(dim=1).float().mean()))


def _lr_factor(step: int, total: int) -> float:
    """Linear warm-up over the first 10% of the steps, then constant.

    No decay on purpose: the warm-up is stopped early, and a constant rate makes its accuracy
    grow with `steps` instead of depending on where a decay schedule happens to end.
    """
    warm = max(1, total // 10)
    return min(1.0, (step + 1) / warm)


def train(model: LlamaForCausalLM, spec: WarmupSpec, progress: Progress | None = None) -> float:
    """Run the supervised warm-up on `model` in place; returns the mean loss of the last 10% steps."""
    import torch

    problems = generate_problems(spec.data_seed, spec.steps * spec.batch_size)
    eval_problems = generate_problems(EVAL_SEED, EVAL_PROBLEMS // 4) if progress else []
    optimizer = torch.optim.AdamW(model.parameters(), lr=spec.lr, weight_decay=spec.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: _lr_factor(s, spec.steps))
    model.train()
    losses: list[float] = []
    report_every = max(1, spec.steps // 10)
    started = time.monotonic()
    for step in range(spec.steps):
        batch = problems[step * spec.batch_size : (step + 1) * spec.batch_size]
        input_ids, labels = encode_examples(batch)
        logprobs = _token_logprobs(model, input_ids, labels)
        loss = -logprobs.sum() / (labels[:, 1:] != IGNORE_INDEX).sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        losses.append(float(loss.detach()))
        if progress and ((step + 1) % report_every == 0 or step + 1 == spec.steps):
            model.eval()
            accuracy = evaluate(model, eval_problems)
            model.train()
            progress(
                f"warm-up step {step + 1}/{spec.steps}  loss {losses[-1]:.3f}  "
                f"exact@T=1 {accuracy.sampled:.1%}  greedy {accuracy.greedy:.1%}  "
                f"{time.monotonic() - started:.1f}s"
            )
    model.eval()
    tail = losses[-max(1, spec.steps // 10) :]
    return sum(tail) / len(tail) if tail else float("nan")


def warmup(path: Path, spec: WarmupSpec | None = None, progress: Progress | None = print) -> ModelManifest:
    """Warm up the model in `path` with `spec` and save it back; a no-op if already done.

    The directory must hold a model made by `init_model` (its manifest gives the model spec).
    Training always restarts from the spec's seeded initial weights, so a directory warmed
    with other settings is rebuilt rather than trained further: the result depends on the
    settings only, never on the directory's history.
    """
    spec = spec or WarmupSpec()
    path = Path(path)
    manifest = read_manifest(path)
    if manifest is None:
        raise ModelNotFound(f"no proofpool model in {path}; run `proofpool-arithmetic init` first")
    if manifest.warmup == asdict(spec):
        if progress:
            progress(f"{path} is already warmed up with these settings")
        return manifest
    import torch

    model = create_model(manifest.spec)
    started = time.monotonic()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.data_seed)  # dropout-free model, but keep any RNG use seeded
        final_loss = train(model, spec, progress)
    model = model.to(torch.bfloat16).to(torch.float32)  # measure what gets saved
    accuracy = evaluate(model, generate_problems(EVAL_SEED, EVAL_PROBLEMS))
    metrics = {
        "final_loss": round(final_loss, 4),
        "accuracy_sampled_t1": round(accuracy.sampled, 4),
        "accuracy_greedy": round(accuracy.greedy, 4),
        "seconds": round(time.monotonic() - started, 1),
    }
    if progress:
        progress(
            f"warm-up done in {metrics['seconds']}s: exact answers {accuracy.sampled:.1%} sampled at T=1, "
            f"{accuracy.greedy:.1%} greedy"
        )
    manifest = replace(manifest, warmup=asdict(spec), metrics=metrics)
    save_model(model, path, manifest)
    return manifest

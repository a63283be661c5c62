"""Held-out evaluation: how well a checkpoint solves problems no worker is ever assigned.

The training reward is the mean reward of the step's rollouts: sampled at the pool's temperature,
from checkpoints one or two versions old, on a different handful of problems each step, so it is
noisy and lags the policy. This measures each published version on the pool's held-out slice
(`proofpool.core.environment.Taskset.held_out`: problems of the task's own distribution that
`draw` never returns), greedily, with the trainer's own transformers model:

- prompts are the task set's `prompt_tokens`, the ids workers would send;
- each completion is the greedy continuation (`generate`, no sampling, no repetition penalty
  or other processor of the model's `generation_config`), cut after the first of the pool's
  stop ids, at most the pool's assignment budget (`max_tokens`) long;
- `accuracy` is the share of problems whose completion earns the full reward (1.0) by the task
  set's `score`, `reward` the mean reward (they differ only for partial-credit tasks).

The trainer runs it on rank 0 alone, on the weights it published (`BehaviorPolicies.policy`), so
under FSDP it involves no collective: the other ranks wait for rank 0's next command as they do
while it gathers rollouts and publishes (`proofpool.trainer.train`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from proofpool.core.environment import Environment, Taskset

if TYPE_CHECKING:
    from transformers import PreTrainedModel

log = logging.getLogger(__name__)

FULL_REWARD = 1.0
"""A completion is correct when it earns this reward (rewards are in [0, 1])."""


@dataclass(frozen=True)
class HeldOutScore:
    """One checkpoint version's figures on the held-out problems."""

    version: int
    problems: int
    accuracy: float
    """Share of problems whose greedy completion earns the full reward."""
    reward: float
    """Mean reward of the greedy completions."""
    seconds: float

    def columns(self, prefix: str = "heldout") -> dict[str, float]:
        """The figures as `metrics.csv` columns (`heldout_accuracy`, ...)."""
        return {
            f"{prefix}_accuracy": self.accuracy,
            f"{prefix}_reward": self.reward,
            f"{prefix}_problems": self.problems,
            f"{prefix}_seconds": round(self.seconds, 3),
        }

    @classmethod
    def from_columns(cls, row: Mapping[str, Any], version: int, prefix: str = "heldout") -> HeldOutScore | None:
        """The figures `columns` wrote into a metrics row, None when the row has none."""
        if row.get(f"{prefix}_accuracy") in (None, ""):
            return None
        return cls(
            version=version,
            problems=int(float(row[f"{prefix}_problems"])),
            accuracy=float(row[f"{prefix}_accuracy"]),
            reward=float(row[f"{prefix}_reward"]),
            seconds=float(row[f"{prefix}_seconds"]),
        )

    def line(self) -> str:
        """What the trainer prints after an evaluation."""
        return (
            f"held-out: checkpoint {self.version} greedy accuracy {self.accuracy:.3f} "
            f"(mean reward {self.reward:.3f}) on {self.problems} problems in {self.seconds:.1f}s"
        )


@dataclass(frozen=True)
class HeldOut:
    """A pool's held-out problems and how to decode and score them."""

    taskset: Taskset
    problem_ids: tuple[str, ...]
    stop_ids: frozenset[int]
    pad_id: int
    max_new_tokens: int
    batch_size: int = 64
    """Prompts per `generate` call."""

    @classmethod
    def of_pool(cls, environment: Environment, count: int, max_new_tokens: int, batch_size: int = 64) -> HeldOut:
        """The first `count` held-out problems of the pool's task set (fewer when it holds out
        fewer; none when it holds out none), with its stop and padding ids."""
        problem_ids = tuple(environment.taskset.held_out(count))
        tokens = environment.tokens
        return cls(environment.taskset, problem_ids, tokens.stop_ids, tokens.pad_id, max_new_tokens, batch_size)

    def evaluate(self, model: PreTrainedModel, version: int) -> HeldOutScore:
        """Greedy accuracy and mean reward of `model` (checkpoint `version`) on the problems."""
        started = time.monotonic()
        prompts = [self.taskset.prompt_tokens(p) for p in self.problem_ids]
        completions = greedy_completions(
            model,
            prompts,
            stop_ids=self.stop_ids,
            pad_id=self.pad_id,
            max_new_tokens=self.max_new_tokens,
            batch_size=self.batch_size,
        )
        rewards = [self.taskset.score(p, c) for p, c in zip(self.problem_ids, completions, strict=True)]
        n = len(rewards)
        score = HeldOutScore(
            version=version,
            problems=n,
            accuracy=sum(r >= FULL_REWARD for r in rewards) / n if n else float("nan"),
            reward=sum(rewards) / n if n else float("nan"),
            seconds=time.monotonic() - started,
        )
        log.info(
            "held-out evaluation",
            extra={"version": version, "accuracy": score.accuracy, "reward": score.reward, "seconds": score.seconds},
        )
        return score


def greedy_completions(
    model: PreTrainedModel,
    prompts: Sequence[Sequence[int]],
    *,
    stop_ids: frozenset[int],
    pad_id: int,
    max_new_tokens: int,
    batch_size: int = 64,
) -> list[tuple[int, ...]]:
    """The greedy completion of each prompt, ending with its first stop id (or `max_new_tokens`
    long without one), in the order of `prompts`.

    Prompts are sorted by length and batched, each batch left-padded with `pad_id` under an
    attention mask, so a batch pads little. Only the settings given here steer `generate`: greedy
    search, no repetition penalty, no forced or minimum length, whatever the model's
    `generation_config.json` says. The model's train/eval mode is restored afterwards.
    """
    import torch
    from transformers import GenerationConfig

    if max_new_tokens < 1 or batch_size < 1 or not stop_ids:
        raise ValueError("greedy decoding needs max_new_tokens >= 1, batch_size >= 1 and a stop id")
    if any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token")
    config = GenerationConfig(
        do_sample=False,
        num_beams=1,
        max_new_tokens=max_new_tokens,
        min_new_tokens=0,
        repetition_penalty=1.0,
        no_repeat_ngram_size=0,
        eos_token_id=sorted(stop_ids),
        pad_token_id=pad_id,
        use_cache=True,
        return_dict_in_generate=False,
    )
    device = next(model.parameters()).device
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    out: list[tuple[int, ...]] = [()] * len(prompts)
    was_training = model.training
    model.eval()
    try:
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            width = max(len(prompts[i]) for i in chunk)
            input_ids = torch.full((len(chunk), width), pad_id, dtype=torch.long)  # [batch, width]
            attention_mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for row, i in enumerate(chunk):
                input_ids[row, width - len(prompts[i]) :] = torch.tensor(list(prompts[i]), dtype=torch.long)
                attention_mask[row, width - len(prompts[i]) :] = 1
            with torch.no_grad():
                generated = model.generate(
                    input_ids=input_ids.to(device), attention_mask=attention_mask.to(device), generation_config=config
                )  # [batch, width + new tokens]
            for row, i in enumerate(chunk):
                out[i] = _until_stop(generated[row, width:].tolist(), stop_ids)
    finally:
        model.train(was_training)
    return out


def _until_stop(tokens: Sequence[int], stop_ids: frozenset[int]) -> tuple[int, ...]:
    """`tokens` up to and including the first stop id (what `generate` pads after is dropped)."""
    for k, token in enumerate(tokens):
        if token in stop_ids:
            return tuple(tokens[: k + 1])
    return tuple(tokens)

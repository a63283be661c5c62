"""GRPO learns: the cached devnet model, trained on its own seeded rollouts, gets better at addition.

The warmed devnet model answers about 26% of problems exactly at T=1. Forty GRPO steps of
32 problems x 8 samples (default loss and optimizer settings) must raise both the reward of the
rollouts it trains on and its exact accuracy on held-out problems, measured without sampling
noise by teacher forcing (`proofpool_arithmetic.warmup.evaluate`).

Margins are about half the worst of seeds 0-7 (this setup, measured on 2 cores): rollout reward
last-5 minus first-5 steps +0.065 to +0.137, held-out exact@T=1 +0.116 to +0.133 (from 0.264),
greedy +0.138 to +0.215 (from 0.426). About 25 s on an idle 2-core machine.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import pytest
import torch
from proofpool.trainer.batch import make_batch, token_logprobs
from proofpool.trainer.behavior import BehaviorPolicies, published_weights
from proofpool.trainer.config import GrpoConfig
from proofpool.trainer.step import StepMetrics, grpo_step, make_optimizer
from proofpool_arithmetic.build import ModelSpec, create_model
from proofpool_arithmetic.cache import ensure_devnet_model
from proofpool_arithmetic.task import ANSWER_MAX_TOKENS, Problem, generate_problems, reward
from proofpool_arithmetic.tokenizer import EOS_ID
from proofpool_arithmetic.warmup import EVAL_PROBLEMS, EVAL_SEED, Accuracy, evaluate

from proofpool.core.sampling import sample_tokens
from proofpool.inference.model import load_model
from tests.fixtures.local_rollouts import generate_rollouts

STEPS = 40
PROBLEMS_PER_STEP = 32
GROUP_SIZE = 8
SEED = 0


@dataclass(frozen=True)
class LearningRun:
    steps: list[StepMetrics]
    before: Accuracy
    after: Accuracy

    @property
    def first_rewards(self) -> float:
        return sum(m.mean_reward for m in self.steps[:5]) / 5

    @property
    def last_rewards(self) -> float:
        return sum(m.mean_reward for m in self.steps[-5:]) / 5


def training_problems(seed: int, count: int, held_out: set[Problem]) -> list[Problem]:
    """`count` seeded problems none of which is held out."""
    drawn = [p for p in generate_problems(seed, 2 * count) if p not in held_out]
    return drawn[:count]


def run_learning(seed: int = SEED, steps: int = STEPS, lag: int = 0) -> LearningRun:
    """Train a copy of the cached devnet model with GRPO on local rollouts; the cache is only read.

    With `lag` > 0 the rollouts come from the weights `lag` steps old, rounded to bf16 (what the
    devnet's workers run while the trainer moves on), and the step gets their log-probabilities
    as the behaviour policy's (`proofpool.trainer.behavior`), as `trainer run` does."""
    torch.manual_seed(seed)
    model = load_model(ensure_devnet_model(progress=None), "fp32")
    behavior = BehaviorPolicies(model, lambda _version: model.state_dict())
    behavior.remember(0, model.state_dict())
    held_out = generate_problems(EVAL_SEED, EVAL_PROBLEMS)
    held_out_set = set(held_out)
    cfg = GrpoConfig(seed=seed, normalizer=float(ANSWER_MAX_TOKENS * PROBLEMS_PER_STEP * GROUP_SIZE))
    optimizer = make_optimizer(model, cfg)
    with torch.no_grad():
        before = evaluate(model, held_out)
    history: list[StepMetrics] = []
    weights = {0: copy.deepcopy(model.state_dict())}
    generator = copy.deepcopy(model).eval()
    for step in range(steps):
        step_seed = cfg.seed * 1_000_003 + step
        problems = training_problems(step_seed, PROBLEMS_PER_STEP, held_out_set)
        if lag == 0:
            rows = generate_rollouts(
                model, problems, group_size=GROUP_SIZE, sampling_seed=step_seed, model_version=step
            )
            history.append(grpo_step(model, optimizer, rows, cfg))
            continue
        version = max(0, step - lag)
        generator.load_state_dict({k: v.float() for k, v in published_weights(weights[version]).items()})
        rows = generate_rollouts(
            generator, problems, group_size=GROUP_SIZE, sampling_seed=step_seed, model_version=version
        )
        history.append(grpo_step(model, optimizer, rows, cfg, behavior=behavior.logprobs(rows)))
        weights[step + 1] = copy.deepcopy(model.state_dict())
        behavior.remember(step + 1, weights[step + 1])
    with torch.no_grad():
        after = evaluate(model, held_out)
    return LearningRun(history, before, after)


@pytest.mark.slow
def test_grpo_raises_reward_and_held_out_accuracy() -> None:
    run = run_learning()
    summary = (
        f"reward first5 {run.first_rewards:.3f} last5 {run.last_rewards:.3f}; held-out exact@T=1 "
        f"{run.before.sampled:.3f} -> {run.after.sampled:.3f}, greedy {run.before.greedy:.3f} -> {run.after.greedy:.3f}"
    )
    print(summary)
    assert all(m.stepped for m in run.steps), summary
    assert all(abs(m.ratio_mean - 1.0) < 1e-5 for m in run.steps)  # old logprobs = the step's starting policy
    assert run.last_rewards >= run.first_rewards + 0.03, summary
    assert run.after.sampled >= run.before.sampled + 0.06, summary
    assert run.after.greedy >= run.before.greedy + 0.06, summary


@pytest.mark.slow
def test_grpo_learns_from_rollouts_two_versions_old_with_behaviour_logprobs() -> None:
    """The devnet's situation: workers sample with checkpoint n - 2 while the trainer is at n. With
    the samplers' log-probabilities in the ratio the policy improves as on-policy training does
    (held-out +0.07 in 10 steps here); with ratio 1 against the current weights it got worse
    (0.264 -> 0.235), which is what the devnet showed before `proofpool.trainer.behavior`."""
    run = run_learning(steps=10, lag=2)
    summary = f"held-out exact@T=1 {run.before.sampled:.3f} -> {run.after.sampled:.3f}"
    assert all(m.stepped for m in run.steps), summary
    assert any(abs(m.ratio_mean - 1.0) > 1e-4 for m in run.steps[2:])  # off-policy rows: ratios move
    assert run.after.sampled >= run.before.sampled + 0.03, summary
    assert run.after.greedy >= run.before.greedy + 0.03, summary


# --- local rollouts (fast) ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_model():
    return create_model(ModelSpec(seed=5, hidden=32, layers=2, heads=1)).eval()


def test_local_rollouts_are_grouped_scored_and_reproducible(tiny_model) -> None:
    problems = [Problem(3, 4), Problem(50, 49)]
    rows = generate_rollouts(tiny_model, problems, group_size=3, sampling_seed=11)
    assert [r.group_id for r in rows] == [0, 0, 0, 1, 1, 1]
    assert [r.problem_id for r in rows] == ["add-3-4"] * 3 + ["add-50-49"] * 3
    for row in rows:
        c = row.completion_tokens
        assert 1 <= len(c) <= ANSWER_MAX_TOKENS
        assert EOS_ID not in c[:-1] and (c[-1] == EOS_ID or len(c) == ANSWER_MAX_TOKENS)
        assert row.reward == reward(row.problem_id, c)
        assert row.proofs == b""
    for g in (0, 1):
        group = [r for r in rows if r.group_id == g]
        mean = sum(r.reward for r in group) / 3
        assert [r.advantage for r in group] == pytest.approx([r.reward - mean for r in group], abs=1e-6)
    assert rows == generate_rollouts(tiny_model, problems, group_size=3, sampling_seed=11)
    assert len({r.completion_tokens for r in rows}) > 1  # the sample index varies the noise


def test_local_rollouts_replay_with_the_seeded_sampler(tiny_model) -> None:
    """What a validator checks: one prefill of prompt + completion, then row i's token at position t
    is `sample_tokens` of the logits before it with sample index i."""
    rows = generate_rollouts(tiny_model, [Problem(12, 34), Problem(7, 8)], group_size=4, sampling_seed=99)
    batch = make_batch(rows)
    with torch.no_grad():
        logits = tiny_model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[:, :-1]
        assert token_logprobs(tiny_model, batch)[batch.mask].lt(0).all()
    for i, row in enumerate(rows):
        row_logits = logits[i][batch.mask[i]]  # [completion, vocab]
        positions = torch.arange(len(row.completion_tokens))
        replayed = sample_tokens(row_logits, row.temperature, row.sampling_seed, i, positions)
        assert replayed.tolist() == list(row.completion_tokens)


def test_greedy_rollouts_are_the_argmax(tiny_model) -> None:
    rows = generate_rollouts(tiny_model, [Problem(1, 1)], group_size=2, sampling_seed=5, temperature=0)
    assert rows[0].completion_tokens == rows[1].completion_tokens

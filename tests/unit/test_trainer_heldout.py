"""The trainer's held-out evaluation (`proofpool.trainer.heldout`) on the devnet model: greedy
completions from transformers' `generate` are the argmax continuation whatever the model's own
generation settings, cut after the pool's stop id; accuracy is the share of full rewards and agrees
with the exact teacher-forced greedy accuracy; a spec pool's held-out problems (chat template, two
stop ids) go through the same path; the figures land in metrics.csv and reward.png."""

from __future__ import annotations

import copy
import csv
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import torch
from proofpool.devnet.tiny_model import build_tiny_qwen3
from proofpool.trainer.behavior import BehaviorPolicies, published_weights
from proofpool.trainer.heldout import HeldOut, HeldOutScore, greedy_completions
from proofpool.trainer.metrics import append_csv, figure, heldout_by_version, plot, read_csv
from proofpool_arithmetic import ENVIRONMENT
from proofpool_arithmetic.build import ModelSpec, create_model
from proofpool_arithmetic.cache import ensure_devnet_model
from proofpool_arithmetic.task import problem_from_id
from proofpool_arithmetic.tokenizer import EOS_ID, PAD_ID
from proofpool_arithmetic.warmup import evaluate

from proofpool.core.environment import Message, Problem, Score
from proofpool.envs import pool_assignment
from proofpool.envs.tokenized import model_environment
from proofpool.inference.model import load_model

pytestmark = pytest.mark.timeout(900)  # the first use of the devnet model builds it

TASKS = ENVIRONMENT.taskset
MAX_TOKENS = pool_assignment(ENVIRONMENT).max_tokens  # 8, the devnet pool's budget


@pytest.fixture(scope="module")
def model():
    return load_model(ensure_devnet_model(progress=None), "fp32")


def _argmax_continuation(model, prompt: tuple[int, ...], stop_ids: set[int], budget: int) -> tuple[int, ...]:
    """Greedy decoding by hand: one prompt, no padding, no cache, the argmax each time."""
    tokens: list[int] = []
    with torch.no_grad():
        while len(tokens) < budget:
            logits = model(input_ids=torch.tensor([[*prompt, *tokens]])).logits[0, -1]
            tokens.append(int(logits.argmax()))
            if tokens[-1] in stop_ids:
                break
    return tuple(tokens)


def test_generate_is_the_argmax_continuation_whatever_the_models_generation_config(model) -> None:
    """Prompts of 5, 6 and 7 tokens share left-padded batches; the model's generation_config asks
    for sampling, a repetition penalty and a minimum length, none of which may leak in."""
    ids = TASKS.held_out(96)
    prompts = [TASKS.prompt_tokens(p) for p in ids]
    assert {len(p) for p in prompts} == {5, 6, 7}
    steered = copy.deepcopy(model)
    steered.generation_config.update(do_sample=True, temperature=0.7, top_k=3, repetition_penalty=1.5, min_new_tokens=5)
    steered.train()
    got = greedy_completions(
        steered, prompts, stop_ids=frozenset({EOS_ID}), pad_id=PAD_ID, max_new_tokens=MAX_TOKENS, batch_size=32
    )
    expected = [_argmax_continuation(model, p, {EOS_ID}, MAX_TOKENS) for p in prompts]
    assert got == expected
    assert steered.training  # the mode is restored
    assert any(c[-1] == EOS_ID and len(c) < MAX_TOKENS for c in got)  # stops at the stop id ...
    assert all(EOS_ID not in c[:-1] for c in got)  # ... and nothing follows it


def test_a_budget_cuts_completions_that_do_not_stop(model) -> None:
    prompts = [TASKS.prompt_tokens(p) for p in TASKS.held_out(16)]
    got = greedy_completions(model, prompts, stop_ids=frozenset({EOS_ID}), pad_id=PAD_ID, max_new_tokens=2)
    assert all(len(c) <= 2 for c in got) and any(len(c) == 2 and c[-1] != EOS_ID for c in got)


def test_accuracy_is_the_share_of_full_rewards_and_the_exact_greedy_accuracy(model) -> None:
    held = HeldOut.of_pool(ENVIRONMENT, 512, MAX_TOKENS)
    assert held.problem_ids == tuple(TASKS.held_out(512)) and held.stop_ids == {EOS_ID} and held.pad_id == PAD_ID
    before = {k: v.clone() for k, v in model.state_dict().items()}
    score = held.evaluate(model, 3)
    # teacher forcing: the answer's digits and <eos> are each the argmax, i.e. greedy decoding is right
    exact = evaluate(model, [problem_from_id(p) for p in held.problem_ids]).greedy
    assert score.accuracy == pytest.approx(exact, abs=1.5 / 512)
    assert score.reward == score.accuracy  # arithmetic rewards are 0 or 1
    assert 0.1 < score.accuracy < 0.95  # the warmed model: far from both ends
    assert (score.version, score.problems) == (3, 512) and score.seconds > 0
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # evaluating changes nothing


def test_other_weights_score_otherwise(model) -> None:
    """An untrained model of the same shape answers (almost) nothing: the figure measures the weights."""
    held = HeldOut.of_pool(ENVIRONMENT, 64, MAX_TOKENS)
    assert held.evaluate(create_model(ModelSpec(seed=3)), 0).accuracy < 0.05 < held.evaluate(model, 0).accuracy


def test_the_trainer_evaluates_the_published_weights(model) -> None:
    """`BehaviorPolicies.policy(version)` holds the weights as published (bf16), not the trainer's
    fp32 ones, and is what the trainer evaluates."""
    behavior = BehaviorPolicies(model, lambda _version: {})
    trained = {k: v + 1e-3 * torch.randn_like(v) for k, v in model.state_dict().items()}
    behavior.remember(1, trained)
    policy = behavior.policy(1)
    for name, tensor in published_weights(trained).items():
        assert torch.equal(policy.state_dict()[name], tensor.float())
    assert not policy.training


def test_of_pool_takes_what_the_pool_holds_out() -> None:
    assert HeldOut.of_pool(ENVIRONMENT, 64, MAX_TOKENS).problem_ids == tuple(TASKS.held_out(64))
    assert HeldOut.of_pool(ENVIRONMENT, 10_000, MAX_TOKENS).problem_ids == tuple(TASKS.held_out(512))
    assert HeldOut.of_pool(ENVIRONMENT, 0, MAX_TOKENS).problem_ids == ()


def _row(step: int, reward: float, loss: float) -> dict[str, float]:
    return {"step": step, "version": step, "mean_reward": reward, "loss": loss}


def test_metrics_keep_one_row_per_step_and_give_the_curve_by_version(tmp_path: Path) -> None:
    path = tmp_path / "metrics.csv"
    append_csv(path, _row(1, 0.25, 0.1))  # an older trainer: no held-out columns
    base, first, second = (HeldOutScore(v, 64, acc, acc, 0.5) for v, acc in ((0, 0.375), (2, 0.4375), (3, 0.5)))
    append_csv(path, {**_row(2, 0.3, 0.1), **first.columns(), **base.columns("base_heldout")})
    append_csv(path, {**_row(3, 0.35, 0.1), **second.columns()})
    rows = read_csv(path)
    assert [r["step"] for r in rows] == ["1", "2", "3"]
    header = next(csv.reader(path.open()))
    assert {"heldout_accuracy", "heldout_reward", "base_heldout_accuracy"} <= set(header)
    found = heldout_by_version(rows)
    assert [(s.version, s.accuracy, s.reward, s.problems) for s in found] == [
        (0, 0.375, 0.375, 64),
        (2, 0.4375, 0.4375, 64),
        (3, 0.5, 0.5, 64),
    ]


def test_the_plot_draws_held_out_accuracy_beside_the_training_reward(tmp_path: Path) -> None:
    scores = [HeldOutScore(v, 64, 0.25 + v / 20, 0.25 + v / 20, 0.1) for v in range(3)]
    rows = [
        {**_row(1, 0.2, 0.1), **scores[1].columns(), **scores[0].columns("base_heldout")},
        {**_row(2, 0.3, 0.1), **scores[2].columns()},
    ]
    top = figure(rows, "pool 1").axes[0]
    assert [line.get_label() for line in top.lines] == [
        "training reward (rollouts)",
        "held-out greedy accuracy (64 problems)",
    ]
    assert list(top.lines[1].get_xdata()) == [0, 1, 2] and list(top.lines[1].get_ydata()) == [0.25, 0.3, 0.35]
    assert len(figure([_row(1, 0.2, 0.1)], "no evaluation").axes[0].lines) == 1
    png = plot(rows, tmp_path / "reward.png", "pool 1")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


class Echo:
    """A task environment whose problem i asks for the number i (scored 1 for the text `i`)."""

    id, version = "echo", "1"

    def __len__(self) -> int:
        return 60

    def problem(self, index: int) -> Problem:
        return Problem(index, f"echo/{index}", (Message("user", f"Say {index * 37}."),), str(index))

    def score(self, index: int, completion: str) -> Score:
        right = completion.strip() == str(index)
        return Score(1.0 if right else 0.0, "correct" if right else "incorrect")

    def reference_completion(self, index: int) -> str | None:
        return str(index)

    def describe(self) -> Mapping[str, Any]:
        return {}


def test_a_spec_pools_held_out_problems_are_prompted_decoded_and_scored_as_workers_and_validators_do(
    tmp_path: Path,
) -> None:
    """A tiny Qwen3 with a chat template and two stop ids, the held-out slice of a tokenized task
    set: each completion is the argmax continuation of the rendered prompt, and the figures are
    the task set's scores of exactly those completions."""
    qwen = build_tiny_qwen3(tmp_path / "qwen", ["Say 12. 12 <|im_end|>", "Say 7. 7"])
    pool = model_environment(Echo(), qwen, max_prompt_tokens=64, max_completion_tokens=6, held_out=6)
    held = HeldOut.of_pool(pool, 64, 6, batch_size=4)
    assert held.problem_ids == tuple(pool.taskset.held_out(6)) and len(held.problem_ids) == 6
    assert held.stop_ids == pool.tokens.stop_ids and len(held.stop_ids) == 2
    prompts = [pool.taskset.prompt_tokens(p) for p in held.problem_ids]
    assert len({len(p) for p in prompts}) > 1  # left padding is exercised
    model = load_model(qwen, "fp32")
    expected = [_argmax_continuation(model, p, set(held.stop_ids), 6) for p in prompts]
    assert (
        greedy_completions(model, prompts, stop_ids=held.stop_ids, pad_id=held.pad_id, max_new_tokens=6, batch_size=4)
        == expected
    )
    rewards = [pool.taskset.score(p, c) for p, c in zip(held.problem_ids, expected, strict=True)]
    score = held.evaluate(model, 0)
    assert score.reward == sum(rewards) / 6 and score.accuracy == sum(r == 1.0 for r in rewards) / 6

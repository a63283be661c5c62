"""Any allowlisted Hugging Face model and any task environment, through the worker's real engine
and the validator's real checks: a tiny Qwen3 (byte-level BPE trained here, ChatML template, two
stop ids in its generation config) on reasoning-gym problems, rendered with its chat template.

No arithmetic, no devnet tokenizer: the path a real pool takes. The worker generates a rollout
file with vLLM (TOPLOC capture found on the Qwen3 final norm), the validator recomputes it with
transformers (decoder and head found through the Auto accessors) and accepts it; an edited
completion is rejected; generation ends exactly at the pool's stop set.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from proofpool.devnet.tiny_model import build_tiny_qwen3
from proofpool.validator.checks import PoolRules, SubmissionFacts, run_checks

from proofpool.core.assignment import sampling_seed, task_ids
from proofpool.core.rollout import RolloutFileMeta, read_rollouts, rollouts_bytes
from proofpool.envs.tasks import load_task_environment
from proofpool.envs.tokenized import ModelEnvironment, model_environment
from proofpool.inference.model import load_model

pytestmark = [pytest.mark.slow, pytest.mark.vllm, pytest.mark.timeout(600)]

POOL_ID, NODE, VERSION, BATCH = 4, "0x" + "ab" * 20, 0, 1
N_PROBLEMS, GROUP_SIZE, MAX_TOKENS, TEMPERATURE = 4, 2, 24, 1.0
CONFIG = {"tasks": {"gcd": 1, "basic_arithmetic": 1}, "seed": 5, "size": 200}


@dataclasses.dataclass
class World:
    environment: ModelEnvironment
    engine: Any
    model_dir: Path


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    from proofpool.worker.engine import EngineConfig, InferenceEngine

    tasks = load_task_environment("reasoning-gym", CONFIG)
    corpus = [m.content for i in range(20) for m in tasks.problem(i).messages]
    model_dir = build_tiny_qwen3(tmp_path_factory.mktemp("qwen3"), corpus)
    environment = model_environment(tasks, model_dir, max_prompt_tokens=512, max_completion_tokens=MAX_TOKENS)
    engine = InferenceEngine(model_dir, EngineConfig(max_model_len=1024, max_num_seqs=16))
    yield World(environment, engine, model_dir)
    engine.close()


def _generate(world: World, stop_ids: frozenset[int]) -> bytes:
    from proofpool.worker.rollout import generate_rollout_file

    ids = task_ids(world.environment.taskset, POOL_ID, NODE, VERSION, BATCH, N_PROBLEMS)
    rollout = generate_rollout_file(
        world.engine,
        world.environment.taskset,
        RolloutFileMeta(POOL_ID, NODE),
        ids,
        group_size=GROUP_SIZE,
        sampling_seed=sampling_seed(POOL_ID, NODE, VERSION, BATCH),
        temperature=TEMPERATURE,
        max_tokens=MAX_TOKENS,
        stop_ids=stop_ids,
        model_version=VERSION,
    )
    return rollout.data


def _judge(world: World, data: bytes, stop_ids: frozenset[int] | None = None) -> Any:
    _, rows = read_rollouts(data)
    sub = SubmissionFacts(POOL_ID, hashlib.sha256(data).digest(), NODE, sum(len(r.completion_tokens) for r in rows), 0)
    rules = PoolRules.of(
        world.environment,
        latest_version=VERSION,
        max_completion_tokens=MAX_TOKENS,
        batch_size=N_PROBLEMS,
        group_size=GROUP_SIZE,
        temperature=TEMPERATURE,
    )
    if stop_ids is not None:
        rules = dataclasses.replace(rules, stop_token_ids=stop_ids)
    model = load_model(world.model_dir, "bf16")
    return run_checks(data, sub, rules, lambda version: model)


def test_prompts_are_the_chat_template_rendered_once_without_a_second_bos(world: World) -> None:
    taskset = world.environment.taskset
    problem_id = taskset.draw(1, 1)[0]
    prompt = taskset.prompt_tokens(problem_id)
    text = taskset.tokenizer.decode(prompt)
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>assistant\n")
    assert world.environment.tokens.bos_id is None and prompt[0] == taskset.tokenizer.convert_tokens_to_ids(
        "<|im_start|>"
    )
    assert world.environment.tokens.stop_ids == {
        taskset.tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")
    }
    assert world.environment.tokens.vocab_size == len(taskset.tokenizer)


def test_an_honest_qwen3_file_passes_every_validator_check(world: World) -> None:
    data = _generate(world, world.environment.tokens.stop_ids)
    verdict = _judge(world, data)
    assert verdict.accepted, (verdict.reason, verdict.evidence)
    assert verdict.checked_rows == N_PROBLEMS * GROUP_SIZE
    _, rows = read_rollouts(data)
    assert all(0.0 <= r.reward <= 1.0 for r in rows)


def test_an_edited_completion_token_is_rejected(world: World) -> None:
    meta, rows = read_rollouts(_generate(world, world.environment.tokens.stop_ids))
    target = next(i for i, r in enumerate(rows) if len(r.completion_tokens) > 3)
    tokens = list(rows[target].completion_tokens)
    tokens[2] = 100 if tokens[2] != 100 else 101
    rows[target] = dataclasses.replace(rows[target], completion_tokens=tuple(tokens))
    verdict = _judge(world, rollouts_bytes(meta, rows))
    assert not verdict.accepted
    assert verdict.reason in {"toploc_exp_mismatch", "toploc_mantissa", "sampling_mismatch", "reward_mismatch"}


def test_generation_ends_exactly_at_the_pools_stop_set(world: World) -> None:
    """A wide stop set makes almost every completion end early: each ends at its first stop id,
    and the validator holding the same set accepts the file."""
    wide = frozenset(range(3, 250)) | world.environment.tokens.stop_ids
    data = _generate(world, wide)
    _, rows = read_rollouts(data)
    ended = [r.completion_tokens for r in rows if len(r.completion_tokens) < MAX_TOKENS]
    assert ended, "no completion stopped early on a stop set of 250 ids"
    assert all(c[-1] in wide and not any(t in wide for t in c[:-1]) for c in ended)
    assert _judge(world, data, wide).accepted
    narrow = _judge(world, data)  # a validator with the model's own stop set sees tokens after no stop
    assert not narrow.accepted and narrow.reason == "eos_mismatch"

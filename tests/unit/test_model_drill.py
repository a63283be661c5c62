"""Cheat drills on a pool that runs a task environment on a Hugging Face model
(`proofpool.devnet.model_drill`): the reference answer as completion ids and a same-shape model
with other weights, so `devnet run --model --env` can stage the same cheats as the arithmetic pool."""

from __future__ import annotations

from pathlib import Path

import pytest
from proofpool.devnet.adversary import DrillEnvironment, edit_to_correct_answers
from proofpool.devnet.model_drill import COMPLETE_MARK, ModelDrill
from proofpool.devnet.tiny_model import build_tiny_qwen3

from proofpool.core.errors import ConfigError
from proofpool.core.rollout import RolloutSample
from proofpool.envs.tasks import load_task_environment
from proofpool.envs.tokenized import model_environment

pytestmark = pytest.mark.timeout(300)

CONFIG = {"tasks": {"basic_arithmetic": 1}, "seed": 3, "size": 20}


@pytest.fixture(scope="module")
def drill(tmp_path_factory: pytest.TempPathFactory) -> ModelDrill:
    tasks = load_task_environment("reasoning-gym", CONFIG)
    corpus = [m.content for i in range(10) for m in tasks.problem(i).messages]
    model = build_tiny_qwen3(tmp_path_factory.mktemp("drill") / "base", corpus)
    environment = model_environment(tasks, model, max_prompt_tokens=512, max_completion_tokens=64)
    return ModelDrill(environment)


def test_a_model_drill_is_a_drill_environment(drill: ModelDrill) -> None:
    assert isinstance(drill, DrillEnvironment)


def test_the_reference_completion_scores_full_marks_and_ends_the_turn(drill: ModelDrill) -> None:
    taskset = drill.taskset
    im_end = taskset.tokenizer.convert_tokens_to_ids("<|im_end|>")
    for problem_id in ("0", "7", "19"):
        ids = drill.reference_completion(problem_id)
        assert ids[-1] == im_end and im_end in taskset.stop_ids
        assert taskset.score(problem_id, ids) == 1.0, taskset.judge(problem_id, ids)


def test_edit_tokens_rewrites_a_wrong_row_to_the_reference(drill: ModelDrill) -> None:
    taskset = drill.taskset
    wrong = tuple(taskset.tokenizer.encode("<answer>nonsense</answer>", add_special_tokens=False))
    row = RolloutSample(
        problem_id="4",
        group_id=0,
        prompt_tokens=taskset.prompt_tokens("4"),
        completion_tokens=wrong,
        reward=0.0,
        advantage=0.0,
        sampling_seed=1,
        temperature=1.0,
        model_version=0,
        proofs=b"",
    )
    (edited,), changed = edit_to_correct_answers(drill, [row], max_tokens=64)
    assert changed == 1 and edited.completion_tokens == drill.reference_completion("4") and edited.reward == 1.0


def test_a_problem_without_a_reference_is_refused_with_a_reason(drill: ModelDrill) -> None:
    class NoReference:
        def __getattr__(self, name: str) -> object:
            return getattr(drill.taskset.environment, name)

        def reference_completion(self, index: int) -> None:
            return None

    original = drill.taskset.environment
    drill.taskset.environment = NoReference()  # type: ignore[assignment]
    try:
        with pytest.raises(ConfigError, match="no reference answer for 3"):
            drill.reference_completion("3")
    finally:
        drill.taskset.environment = original


def test_the_variant_has_the_base_shape_and_tokenizer_but_other_weights(drill: ModelDrill) -> None:
    from safetensors.torch import load_file

    base = drill.environment.model_dir
    variant = drill.variant_model(1)
    assert (variant / COMPLETE_MARK).is_file()
    assert (variant / "tokenizer.json").read_bytes() == (base / "tokenizer.json").read_bytes()
    mine, theirs = load_file(str(base / "model.safetensors")), load_file(str(variant / "model.safetensors"))
    assert mine.keys() == theirs.keys()
    assert all(mine[k].shape == theirs[k].shape and mine[k].dtype == theirs[k].dtype for k in mine)
    assert any(not mine[k].equal(theirs[k]) for k in mine if mine[k].ndim == 2)
    again = drill.variant_model(1)  # cached: the same directory, not rebuilt
    assert again == variant and _mtime(again) == _mtime(variant)
    assert drill.variant_model(2) != variant


def _mtime(path: Path) -> float:
    return (path / "model.safetensors").stat().st_mtime

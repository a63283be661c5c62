"""A text task environment on a model's tokenizer (`proofpool.envs.tokenized`, `proofpool.envs.prompt`):
problem ids, draws, prompts rendered once with the chat template, completions decoded for scoring."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from proofpool.devnet.tiny_model import CHATML_TEMPLATE, build_tiny_qwen3
from proofpool_arithmetic.cache import ensure_devnet_model

from proofpool.core.environment import InvalidProblemId, Message, Problem, Score
from proofpool.envs.prompt import PromptError, decode_completion, render_prompt
from proofpool.envs.tokenized import TokenizedTaskset, default_stop_ids, model_environment

pytestmark = pytest.mark.timeout(300)

SAMPLES = (
    "Hello  world 12345 ü 日本\n\n def f(x):\n    return x",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n",
    "  leading spaces, trailing\t",
    "12+34=46",
)


class Echo:
    """A task environment whose problem i asks for the number i and scores the text `str(i)` 1."""

    id, version = "echo", "1"

    def __init__(self, size: int = 50) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    def problem(self, index: int) -> Problem:
        if not 0 <= index < self.size:
            raise InvalidProblemId(str(index))
        return Problem(
            index, f"echo/{index}", (Message("system", "Answer."), Message("user", f"Say {index}.")), str(index)
        )

    def score(self, index: int, completion: str) -> Score:
        right = completion.strip() == str(index)
        return Score(1.0 if right else 0.0, "correct" if right else "incorrect", completion)

    def reference_completion(self, index: int) -> str | None:
        return str(index)

    def describe(self) -> Mapping[str, Any]:
        return {"size": self.size}


@pytest.fixture(scope="module")
def qwen(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_qwen3(tmp_path_factory.mktemp("qwen"), SAMPLES)


@pytest.fixture(scope="module")
def taskset(qwen: Path) -> TokenizedTaskset:
    return model_environment(Echo(), qwen, max_prompt_tokens=64, max_completion_tokens=8).taskset


def _tokenizer(path: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path))


@pytest.mark.parametrize("shipped", ["tiny-qwen3", "devnet-arithmetic"])
def test_the_raw_tokenizer_and_autotokenizer_agree(shipped: str, qwen: Path) -> None:
    """transformers may rebuild a tokenizer from its model type (a custom BPE in a qwen2 directory
    under transformers 5); every tokenizer we ship must encode as its own tokenizer.json does."""
    from tokenizers import Tokenizer

    path = qwen if shipped == "tiny-qwen3" else ensure_devnet_model(progress=None)
    raw, auto = Tokenizer.from_file(str(path / "tokenizer.json")), _tokenizer(path)
    texts = SAMPLES if shipped == "tiny-qwen3" else ("12+34=", "99+1=100", "7")
    for text in texts:
        assert auto(text, add_special_tokens=False)["input_ids"] == raw.encode(text, add_special_tokens=False).ids


def test_problem_ids_are_canonical_indices_of_the_index_list(qwen: Path) -> None:
    taskset = TokenizedTaskset(Echo(), _tokenizer(qwen), frozenset({2}), indices=[3, 5, 8])
    assert taskset.index("5") == 5
    for bad in ["4", "05", "-5", "5 ", "", "five", "50", "9" * 40]:
        with pytest.raises(InvalidProblemId):
            taskset.index(bad)
    draws = taskset.draw(123, 200)
    assert set(draws) == {"3", "5", "8"} and draws == taskset.draw(123, 200) != taskset.draw(124, 200)
    assert taskset.draw(2**64 - 1, 3) == taskset.draw(2**64 - 1, 3)
    with pytest.raises(ValueError, match="outside"):
        TokenizedTaskset(Echo(), _tokenizer(qwen), frozenset({2}), indices=[0, 50])
    with pytest.raises(ValueError, match="empty"):
        TokenizedTaskset(Echo(), _tokenizer(qwen), frozenset({2}), indices=[])


def test_the_prompt_is_the_chat_template_rendered_without_a_second_bos(taskset: TokenizedTaskset) -> None:
    prompt = taskset.prompt_tokens("7")
    assert taskset.tokenizer.decode(prompt) == (
        "<|im_start|>system\nAnswer.<|im_end|>\n<|im_start|>user\nSay 7.<|im_end|>\n<|im_start|>assistant\n"
    )
    assert taskset.prompt_tokens("7") is prompt  # rendered once


def test_a_template_that_writes_bos_gets_it_once(qwen: Path) -> None:
    tokenizer = _tokenizer(qwen)
    tokenizer.bos_token = "<|endoftext|>"
    template = "{{ bos_token }}" + CHATML_TEMPLATE
    ids = render_prompt(tokenizer, [Message("user", "hi")], chat_template=template)
    assert ids[0] == tokenizer.bos_token_id and ids.count(tokenizer.bos_token_id) == 1


def test_template_variables_are_pinned_so_every_machine_renders_the_same(qwen: Path) -> None:
    tokenizer = _tokenizer(qwen)
    template = "{{ date_string }}|{{ messages[0]['content'] }}"
    pinned = render_prompt(tokenizer, [Message("user", "x")], chat_template=template)
    assert tokenizer.decode(pinned).startswith("01 Jan 2025|")
    chosen = render_prompt(tokenizer, [Message("user", "x")], {"date_string": "26 Nov 2026"}, template)
    assert tokenizer.decode(chosen).startswith("26 Nov 2026|")


def test_a_tokenizer_without_a_template_or_a_failing_template_is_a_clear_error(qwen: Path) -> None:
    tokenizer = _tokenizer(qwen)
    tokenizer.chat_template = None
    with pytest.raises(PromptError, match="no chat template"):
        render_prompt(tokenizer, [Message("user", "x")])
    with pytest.raises(PromptError, match="template failed"):
        render_prompt(tokenizer, [Message("user", "x")], chat_template="{{ raise_exception('no') }}")


def test_scoring_decodes_the_completion_without_its_stop_token(taskset: TokenizedTaskset) -> None:
    tokenizer = taskset.tokenizer
    stop = tokenizer.convert_tokens_to_ids("<|im_end|>")
    seven = tokenizer("7", add_special_tokens=False)["input_ids"]
    assert taskset.score("7", [*seven, stop]) == 1.0
    assert taskset.score("7", seven) == 1.0  # cut at the budget
    assert taskset.judge("8", [*seven, stop]).status == "incorrect"
    assert decode_completion(tokenizer, [*seven, stop, *seven], frozenset({stop})) == "77"  # special dropped
    with pytest.raises(InvalidProblemId):
        taskset.score("50", seven)


def test_the_model_environment_takes_vocab_and_stop_ids_from_the_model(qwen: Path, taskset: TokenizedTaskset) -> None:
    env = model_environment(Echo(), qwen, max_prompt_tokens=64, max_completion_tokens=8)
    config = json.loads((qwen / "config.json").read_text())
    ids = {taskset.tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")}
    assert env.tokens.vocab_size == config["vocab_size"] and env.tokens.stop_ids == ids
    assert env.tokens.pad_id == taskset.tokenizer.convert_tokens_to_ids("<|endoftext|>")
    assert default_stop_ids(qwen, taskset.tokenizer) == ids
    narrowed = model_environment(Echo(), qwen, max_prompt_tokens=64, max_completion_tokens=8, stop_ids=frozenset({2}))
    assert narrowed.tokens.stop_ids == {2} and narrowed.base_model("any") == qwen

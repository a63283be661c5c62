"""A text task environment on a model's tokenizer: the token-level `Environment` every role runs.

Task environments (`proofpool.core.environment.TaskEnvironment`) speak text: chat turns in,
a completion's text scored. The market moves token ids: workers generate from prompt ids,
validators compare a row's prompt ids with their own and rescore its completion ids, the trainer
pads with the model's ids. `TokenizedTaskset` joins the two with the pool's model directory:

- problem ids are the decimal index of the problem in the environment (`"17"`), drawn only from
  the pool's index list (all problems, or the difficulty filter's), less its held-out slice;
- the held-out slice (`held_out_slice`, sized by the pool spec's `indices.held_out`) is the
  problems of the list whose ids rank first by sha256: a fixed, order-independent sample of the
  list that no draw returns, on which the trainer evaluates its checkpoints;
- prompts are rendered by `proofpool.envs.prompt.render_prompt`, the one function every role uses;
- rewards come from the environment's score of the decoded completion (stop id removed);
- draws hash (seed, k) with sha256, so they never depend on a random-number library's version.

`model_environment` adds the `TokenLimits` of the model: its vocabulary (from `config.json`), its
stop ids (the tokenizer's end-of-sequence token and every id of `generation_config.json`'s
`eos_token_id`, as vLLM stops on them) and its padding id.
"""

from __future__ import annotations

import hashlib
import heapq
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from proofpool.core.assignment import AssignmentConfig
from proofpool.core.environment import InvalidProblemId, Progress, Score, TaskEnvironment, TokenLimits
from proofpool.envs.prompt import decode_completion, render_prompt
from proofpool.inference.model import model_config

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

HELD_OUT_DOMAIN: Final = b"proofpool/held-out/v1/"
"""Domain tag of the held-out ranking; a change would move problems in or out of every pool's draws."""
MAX_HELD_OUT_SHARE: Final = 0.25
"""The largest share of a pool's distinct problems its held-out slice may take: the rest trains."""
DEFAULT_HELD_OUT_SHARE: Final = 0.1
DEFAULT_HELD_OUT_MAX: Final = 256
"""`default_held_out`: a tenth of the pool's problems, at most 256 (the trainer evaluates 64 by default)."""


def held_out_rank(problem_id: str) -> bytes:
    """Where a problem id ranks in the held-out order: sha256 of the domain tag and the id."""
    return hashlib.sha256(HELD_OUT_DOMAIN + problem_id.encode()).digest()


def held_out_slice(problem_ids: Iterable[str], size: int) -> tuple[str, ...]:
    """The `size` distinct ids of `problem_ids` that rank first by `held_out_rank`, in that order.

    A function of the set of ids alone (not of their order or repeats), and a pseudo-random
    sample of it, so held-out problems come from the pool's own distribution. Every task set
    that holds problems out uses this rule (`proofpool.core.environment.Taskset.held_out`).
    """
    if size < 0:
        raise ValueError(f"a held-out slice holds >= 0 problems, not {size}")
    if size == 0:
        return ()
    return tuple(heapq.nsmallest(size, set(problem_ids), key=lambda i: (held_out_rank(i), i)))


def default_held_out(problems: int) -> int:
    """The held-out size `proofpool env spec` pins for a pool of `problems` distinct problems."""
    return min(DEFAULT_HELD_OUT_MAX, int(problems * DEFAULT_HELD_OUT_SHARE))


@dataclass(frozen=True)
class PromptSettings:
    """How prompts are rendered, as the pool spec pins it."""

    template_kwargs: Mapping[str, Any] = field(default_factory=dict)
    """Extra chat-template variables (pinned, so a date-stamping template renders the same everywhere)."""
    chat_template: str | None = None
    """A template that replaces the model's own (for a base model without one)."""


class TokenizedTaskset:
    """`proofpool.core.environment.Taskset` over a task environment and a tokenizer."""

    def __init__(
        self,
        environment: TaskEnvironment,
        tokenizer: PreTrainedTokenizerBase,
        stop_ids: frozenset[int],
        prompt: PromptSettings | None = None,
        indices: Sequence[int] | None = None,
        held_out: int = 0,
    ) -> None:
        self.environment = environment
        self.tokenizer = tokenizer
        self.stop_ids = frozenset(stop_ids)
        self.prompt = prompt or PromptSettings()
        size = len(environment)
        self.indices: tuple[int, ...] = tuple(range(size)) if indices is None else tuple(int(i) for i in indices)
        if not self.indices:
            raise ValueError("the pool's index list is empty")
        if any(not 0 <= i < size for i in self.indices):
            raise ValueError(f"the pool's index list names problems outside 0..{size - 1}")
        self._allowed = frozenset(self.indices)
        most = int(len(self._allowed) * MAX_HELD_OUT_SHARE)
        if not 0 <= held_out <= most:
            raise ValueError(
                f"a held-out slice of {held_out} problems does not fit the pool's {len(self._allowed)} distinct "
                f"problems: at most {most} (a quarter) may be held out, so that the rest is enough to train on"
            )
        self._held_out = held_out_slice([str(i) for i in self._allowed], held_out)
        held = frozenset(int(i) for i in self._held_out)
        self.training: tuple[int, ...] = tuple(i for i in self.indices if i not in held)
        """The index list less the held-out slice, in list order: what `draw` picks from."""
        self._prompts: dict[str, tuple[int, ...]] = {}

    def draw(self, seed: int, count: int) -> list[str]:
        """`count` problem ids: draw k is the entry sha256(seed, k) picks of the index list less its
        held-out slice (the index list itself when nothing is held out)."""
        n, picks = len(self.training), []
        for k in range(count):
            digest = hashlib.sha256(b"proofpool/draw/v1" + seed.to_bytes(32, "big") + k.to_bytes(8, "big")).digest()
            picks.append(str(self.training[int.from_bytes(digest[:8], "big") % n]))
        return picks

    def held_out(self, count: int) -> list[str]:
        """The first `count` ids of the held-out slice (`held_out_slice` of the index list)."""
        if count < 0:
            raise ValueError(f"count must be >= 0, got {count}")
        return list(self._held_out[:count])

    def index(self, problem_id: str) -> int:
        """The problem index a problem id names; `InvalidProblemId` for anything outside the pool's
        index list (a held-out problem is in it: the trainer prompts and scores those)."""
        if not isinstance(problem_id, str) or not problem_id.isdigit() or problem_id != str(int(problem_id)):
            raise InvalidProblemId(f"problem id {problem_id!r} is not a problem index")
        index = int(problem_id)
        if index not in self._allowed:
            raise InvalidProblemId(f"problem {index} is not in the pool's index list")
        return index

    def prompt_tokens(self, problem_id: str) -> tuple[int, ...]:
        """The prompt ids of a problem (rendered once per process: workers and validators ask for
        the same problems again and again)."""
        cached = self._prompts.get(problem_id)
        if cached is None:
            problem = self.environment.problem(self.index(problem_id))
            settings = self.prompt
            cached = render_prompt(self.tokenizer, problem.messages, settings.template_kwargs, settings.chat_template)
            self._prompts[problem_id] = cached
        return cached

    @property
    def reproducible_scores(self) -> bool:
        """Whether every machine scores a completion alike (the environment's optional
        `reproducible_scores`, True when absent): when not, validators record their judgements
        instead of slashing over rewards (`proofpool.core.environment.TaskEnvironment`)."""
        return bool(getattr(self.environment, "reproducible_scores", True))

    def judge(self, problem_id: str, completion_tokens: Sequence[int]) -> Score:
        """The environment's full judgement of a completion (reward, status, detail)."""
        index = self.index(problem_id)
        return self.environment.score(index, decode_completion(self.tokenizer, completion_tokens, self.stop_ids))

    def score(self, problem_id: str, completion_tokens: Sequence[int]) -> float:
        """The completion's reward in [0, 1]."""
        return self.judge(problem_id, completion_tokens).reward


@dataclass(frozen=True)
class ModelEnvironment:
    """`proofpool.core.environment.Environment` of a pool: a task set tokenized for its model."""

    name: str
    taskset: TokenizedTaskset
    tokens: TokenLimits
    model_dir: Path
    assignment: AssignmentConfig | None = None
    """The assignment settings the pool committed to (a spec's `generation`), None when the
    operator's defaults apply (`proofpool.envs.pool_assignment`)."""

    def base_model(self, model_uri: str, progress: Progress | None = None) -> Path:
        """The model directory the pool was built on (checkpoint version 0)."""
        return self.model_dir


def default_stop_ids(model_dir: Path, tokenizer: PreTrainedTokenizerBase) -> frozenset[int]:
    """The ids a model ends a turn with: its tokenizer's end-of-sequence token and every id of
    `generation_config.json`'s `eos_token_id` (the set vLLM stops on by default)."""
    ids: set[int] = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    generation = Path(model_dir) / "generation_config.json"
    if generation.is_file():
        eos = json.loads(generation.read_text()).get("eos_token_id")
        ids.update([int(eos)] if isinstance(eos, int) else [int(i) for i in eos or ()])
    if not ids:
        raise ValueError(f"model in {model_dir} names no end-of-sequence token; set the pool's stop ids")
    return frozenset(ids)


def model_environment(
    environment: TaskEnvironment,
    model_dir: Path,
    *,
    max_prompt_tokens: int,
    max_completion_tokens: int,
    stop_ids: frozenset[int] | None = None,
    prompt: PromptSettings | None = None,
    indices: Sequence[int] | None = None,
    held_out: int = 0,
) -> ModelEnvironment:
    """The pool's `Environment`: `environment`'s problems tokenized for the model in `model_dir`,
    `held_out` of them kept out of every draw (`TokenizedTaskset`)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    stops = frozenset(stop_ids) if stop_ids else default_stop_ids(model_dir, tokenizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(stops)
    tokens = TokenLimits(
        vocab_size=int(model_config(model_dir)["vocab_size"]),
        stop_ids=stops,
        pad_id=int(pad),
        bos_id=None if tokenizer.bos_token_id is None else int(tokenizer.bos_token_id),
        max_prompt_tokens=max_prompt_tokens,
        max_completion_tokens=max_completion_tokens,
    )
    taskset = TokenizedTaskset(environment, tokenizer, stops, prompt, indices, held_out)
    return ModelEnvironment(environment.id, taskset, tokens, Path(model_dir))

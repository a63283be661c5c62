"""What a pool's environment provides, as every role needs it: tasks, their scoring, token limits.

A pool names its model and task set in its on-chain `modelUri`; the environment behind that URI
(found by `proofpool.envs.environment_for`) is the one thing that knows the task. Workers draw the
problems of an assignment and build their prompts from it, validators re-derive the same problems
and re-score every completion with it, the trainer pads and normalizes with its token limits. The
rest of the market only moves problem ids, token ids and rewards, so it works for any model,
tokenizer and task that implements this protocol.

Everything here must be deterministic: two machines given the same seed draw the same problem
ids, and the same problem id and completion tokens always score the same reward, since a
validator slashes a worker whose numbers differ from its own (unless the task environment
declares `reproducible_scores = False`: see `TaskEnvironment`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal, Protocol, get_args, runtime_checkable

from proofpool.core.errors import ProofpoolError

Progress = Callable[[str], None]
"""Where long work (building or fetching a model) reports what it is doing."""


class InvalidProblemId(ProofpoolError):
    """A problem id names no problem of the task set (e.g. a tampered rollout row)."""


@dataclass(frozen=True)
class TokenLimits:
    """The token ids and lengths every party must agree on for a pool's model and task set."""

    vocab_size: int
    """Token ids are in 0..vocab_size - 1; a row holding any other id is rejected."""
    stop_ids: frozenset[int]
    """The ids that end a completion (the engine stops at the first): a completion shorter than its
    budget must end with one, and none may appear before its end. Instruct models list several
    (`generation_config.json`'s `eos_token_id` and the tokenizer's end-of-sequence token)."""
    pad_id: int
    """The id the trainer pads batches with (never attended to)."""
    bos_id: int | None
    """The id prompts start with, if the tokenizer has one."""
    max_prompt_tokens: int
    """The longest prompt the task set builds."""
    max_completion_tokens: int
    """The longest completion worth generating (the default completion budget of a pool)."""

    def __post_init__(self) -> None:
        if self.vocab_size < 1 or self.max_prompt_tokens < 1 or self.max_completion_tokens < 1:
            raise ValueError(f"token limits must be positive: {self}")
        object.__setattr__(self, "stop_ids", frozenset(int(t) for t in self.stop_ids))
        if not self.stop_ids:
            raise ValueError("stop_ids must name at least one token")
        for name, value in [
            *(("stop id", t) for t in sorted(self.stop_ids)),
            ("pad_id", self.pad_id),
            ("bos_id", self.bos_id),
        ]:
            if value is not None and not 0 <= value < self.vocab_size:
                raise ValueError(f"{name} {value} is outside the vocabulary of {self.vocab_size}")


@runtime_checkable
class Taskset(Protocol):
    """Problems named by ids that encode them, so anyone can rebuild and score one from its id."""

    def draw(self, seed: int, count: int) -> list[str]:
        """`count` problem ids drawn by a generator seeded with `seed` (same seed, same ids).
        Never one of the held-out slice (`held_out`)."""
        ...

    def held_out(self, count: int) -> list[str]:
        """The first `count` problem ids of the held-out slice (all of it when it holds fewer; an
        empty list when the task set holds none out): problems of the task set's own distribution
        that `draw` never returns, so no worker is ever assigned one. The trainer measures its
        checkpoints on them. Fixed for the task set, the same on every machine, and a prefix of the
        slice: a smaller `count` gives the first ids of a larger one."""
        ...

    def prompt_tokens(self, problem_id: str) -> tuple[int, ...]:
        """The prompt the model sees for the problem; raises `InvalidProblemId` for a foreign id."""
        ...

    def score(self, problem_id: str, completion_tokens: Sequence[int]) -> float:
        """The completion's reward, in [0, 1] (raises `InvalidProblemId` for a foreign id)."""
        ...


@runtime_checkable
class Environment(Protocol):
    """A pool's model family and task set, as a plugin (entry point group `proofpool.environments`)."""

    name: str
    taskset: Taskset
    tokens: TokenLimits

    def base_model(self, model_uri: str, progress: Progress | None = None) -> Path:
        """The local Hugging Face model directory of the pool's checkpoint version 0."""
        ...


# --- Task environments: problems and scores in text, for any model and tokenizer -----------------

ScoreStatus = Literal["correct", "incorrect", "unparsed", "error", "timeout", "inconclusive"]
"""How a completion was judged:

- `correct` / `incorrect`: the answer was found and checked (reward is the checker's figure);
- `unparsed`: no answer in the expected format (e.g. no `<answer>` tags, no fenced code block);
- `error`: the answer was found but checking it failed on the completion's side (the program
  raised, the expression does not parse);
- `timeout`: checking hit a CPU-time or wall-clock limit;
- `inconclusive`: the checker could not decide for reasons that are not the completion's fault
  (a limit was nearly reached, the sandbox was overloaded); such rows are not trained on and no
  one is slashed over them.
"""

SCORE_STATUSES: Final[tuple[ScoreStatus, ...]] = get_args(ScoreStatus)


@dataclass(frozen=True)
class Message:
    """One chat turn of a prompt, as a chat template takes it."""

    role: Literal["system", "user", "assistant"]
    content: str


@dataclass(frozen=True)
class Problem:
    """One problem of a task environment, everything a model and a reader need to see of it."""

    index: int
    """Its position in the environment, 0..len(env) - 1: the only thing rollout files carry."""
    source_id: str
    """The source's own name for it (`HumanEval/0`, `basic_arithmetic/17`), for people."""
    messages: tuple[Message, ...]
    """The prompt as chat turns; the pool's model renders them with its chat template."""
    answer: str | None = None
    """A reference answer, for display and tests (never shown to the model)."""
    metadata: Mapping[str, Any] = field(default_factory=dict)
    """JSON-safe extra facts (task name, difficulty); shown by `proofpool env show`."""


@dataclass(frozen=True)
class Score:
    """A completion's judgement: the reward every party must compute identically, and why."""

    reward: float
    """In [0, 1]."""
    status: ScoreStatus
    detail: str = ""
    """One line for a person: what was parsed, which test failed, which limit was hit."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.reward <= 1.0:
            raise ValueError(f"reward {self.reward} is outside [0, 1]")
        if self.status not in SCORE_STATUSES:
            raise ValueError(f"unknown score status {self.status!r} (expected one of {SCORE_STATUSES})")


@runtime_checkable
class TaskEnvironment(Protocol):
    """A verifiable task set, in text: what a pool trains on, independent of model and tokenizer.

    Plugins publish a factory `make(config: Mapping[str, Any]) -> TaskEnvironment` in the entry
    point group `proofpool.environments`, named by the environment id. The same config must build
    the same problems on every machine: problems are pure functions of (config, index), any
    randomness comes from seeds in the config, and scoring depends only on (index, completion).

    An environment whose scores depend on the machine as well (the `code` environment runs
    programs under CPU and wall-clock limits) declares the optional class attribute
    `reproducible_scores = False` (absent means True; read it with `getattr`). Validators then do
    not compare a row's claimed reward with their own, so no one is slashed over a score that
    another machine could have judged otherwise: their own judgement of every row (reward and
    status) is recorded beside the accepted file, and the trainer trains on it, leaving out the
    rows judged `inconclusive` (docs/validator-checks.md).
    """

    id: str
    """The entry point name (`reasoning-gym`, `math`, `code`, `arithmetic`)."""
    version: str
    """The plugin's version; a change that can alter a problem or a score must change it."""

    def __len__(self) -> int:
        """How many problems there are (indices 0..len - 1)."""
        ...

    def problem(self, index: int) -> Problem:
        """The problem at `index`; raises `InvalidProblemId` outside 0..len - 1."""
        ...

    def score(self, index: int, completion: str) -> Score:
        """Judge the completion's text (stop tokens already removed); raises `InvalidProblemId`
        outside 0..len - 1. Never raises for anything the completion contains."""
        ...

    def reference_completion(self, index: int) -> str | None:
        """A completion that earns the full reward: the reference answer in the format the scorer
        parses (None when the source has no reference). Pool specs record its score as a golden
        vector, so a role whose scorer differs from the pool creator's finds out before judging."""
        ...

    def describe(self) -> Mapping[str, Any]:
        """JSON-safe facts the pool spec pins: the normalized config, the versions of the packages
        that produce problems and scores, and a sha256 digest of the problem data."""
        ...


TaskEnvironmentFactory = Callable[[Mapping[str, Any]], TaskEnvironment]
"""What an entry point in `proofpool.environments` names: config -> environment."""

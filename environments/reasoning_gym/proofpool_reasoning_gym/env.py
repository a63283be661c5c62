"""The `reasoning-gym` task environment: reasoning-gym's procedural tasks as prompts and scores.

Every problem is `dataset[index]` of a reasoning-gym dataset built from the checked config (one
task via `create_dataset`, a weighted mix via reasoning-gym's `CompositeDataset`), and reasoning-gym
seeds each item with `seed + index`, so a problem is a pure function of (config, index) and costs
nothing until it is asked for. Scores are the dataset's own `score_answer`, applied to the text of
the completion's last `<answer>` pair, behind a wall that turns anything the scorer raises into an
`error` score: the completion is written by whoever earns the reward.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import threading
from collections import OrderedDict
from collections.abc import Mapping
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as installed_version
from typing import Any, Final

import reasoning_gym
from reasoning_gym.composite import CompositeConfig, CompositeDataset, DatasetSpec
from reasoning_gym.dataset import ProceduralDataset

from proofpool.core.environment import InvalidProblemId, Message, Problem, Score
from proofpool_reasoning_gym.answer import CLOSE_TAG, OPEN_TAG, extract_answer
from proofpool_reasoning_gym.config import EnvConfig

ENV_ID: Final = "reasoning-gym"
VERSION: Final = "0.1.0"
"""This plugin's version; bump it with any change that can alter a prompt, an answer or a score."""

SYSTEM_PROMPT: Final = (
    "Think through the problem step by step before answering. When you are done, give only your final "
    f"answer inside {OPEN_TAG}{CLOSE_TAG} tags, for example {OPEN_TAG}42{CLOSE_TAG}, with no explanation "
    "inside the tags. When the question shows an example of the answer format, follow it exactly."
)
"""Kept here rather than taken from `reasoning_gym.utils.SYSTEM_PROMPTS`, so a reasoning-gym release
cannot change the prompts of a running pool behind this plugin's version."""

MAX_ANSWER_CHARS: Final = 32_768
"""Longer answers score 0 without reaching reasoning-gym's scorer: the longest reference answers are
a few thousand characters (ARC grids), and some scorers do work that grows faster than the text."""

FINGERPRINT_PROBLEMS: Final = 256
ENTRY_CACHE_SIZE: Final = 1024
"""Items kept per environment: a pool scores a group of completions per problem, and a few tasks
(futoshiki, zebra_puzzles) take a second or more to build one item."""

_GENERATION_LOCK: Final = threading.Lock()
"""Serializes building datasets and items in this process: `pool_matrix` seeds numpy's global
random state and then draws from it, which two threads interleaving would break."""

_DETAIL_CHARS: Final = 200


class ReasoningGymEnvironment:
    """A `proofpool.core.environment.TaskEnvironment` over reasoning-gym; build it with `make`."""

    id: Final = ENV_ID
    version: Final = VERSION

    def __init__(self, config: EnvConfig) -> None:
        self._config = config
        self._dataset: ProceduralDataset | None = None
        self._entries: OrderedDict[int, dict[str, Any]] = OrderedDict()
        self._description: dict[str, Any] | None = None

    @property
    def config(self) -> EnvConfig:
        return self._config

    def __len__(self) -> int:
        return self._config.size

    def problem(self, index: int) -> Problem:
        index = self._check_index(index)
        entry = self._entry(index)
        metadata = entry.get("metadata")
        metadata = metadata if isinstance(metadata, Mapping) else {}
        task = metadata.get("source_dataset")
        if not isinstance(task, str):
            task = next(iter(self._config.tasks))
        source_index = metadata.get("source_index", metadata.get("source_idx"))
        if isinstance(source_index, bool) or not isinstance(source_index, int):
            source_index = index
        answer = entry.get("answer")
        return Problem(
            index=index,
            source_id=f"{task}/{source_index}",
            messages=(Message("system", SYSTEM_PROMPT), Message("user", str(entry["question"]))),
            answer=None if answer is None else str(answer),
            metadata=_json_safe_metadata(task, metadata),
        )

    def reference_completion(self, index: int) -> str | None:
        """The entry's reference answer in answer tags (None for tasks that ship none)."""
        answer = self._entry(self._check_index(index)).get("answer")
        return None if answer is None else f"<answer>{answer}</answer>"

    def score(self, index: int, completion: str) -> Score:
        index = self._check_index(index)
        if not isinstance(completion, str):
            raise TypeError(f"a completion is text, got {type(completion).__name__}")
        answer = extract_answer(completion)
        if answer is None:
            return Score(0.0, "unparsed", f"no {OPEN_TAG}...{CLOSE_TAG} pair in the completion")
        if len(answer) > MAX_ANSWER_CHARS:
            return Score(0.0, "incorrect", f"answer of {len(answer)} characters, over the {MAX_ANSWER_CHARS} limit")
        # A copy: scorers get a dict they may change, and the cached item must stay as drawn.
        entry = copy.deepcopy(self._entry(index))
        try:
            reward = float(self._built().score_answer(answer, entry))
        except Exception as exc:  # noqa: BLE001 - any failure inside the scorer is the completion's score
            return Score(0.0, "error", _one_line(f"reasoning-gym's scorer raised {type(exc).__name__}: {_text(exc)}"))
        if math.isnan(reward):
            return Score(0.0, "error", "reasoning-gym's scorer returned NaN")
        reward = min(max(reward, 0.0), 1.0)
        status = "correct" if reward == 1.0 else "incorrect"
        return Score(reward, status, _one_line(f"answer {answer[:80]!r}: reward {reward:g}"))

    def describe(self) -> Mapping[str, Any]:
        """The normalized config, package versions, and a sha256 of the first problems.

        `data_sha256` covers the first min(size, 256) problems (index, messages, answer) rather than
        all of them: drawing every problem of a 10,000-problem pool would take minutes for the
        slower tasks, and any difference in reasoning-gym's generators, the seed handling or this
        plugin's prompt shows up in the first few hundred. Computed once per environment.
        """
        if self._description is None:
            self._description = {
                "id": ENV_ID,
                "version": VERSION,
                "config": self._config.as_json(),
                "packages": {
                    "reasoning-gym": _package_version("reasoning-gym", "unknown"),
                    "proofpool-reasoning-gym": _package_version("proofpool-reasoning-gym", VERSION),
                },
                "data_sha256": self._fingerprint(),
            }
        return json.loads(json.dumps(self._description))

    def _fingerprint(self) -> str:
        rows = []
        for index in range(min(self._config.size, FINGERPRINT_PROBLEMS)):
            problem = self.problem(index)
            messages = [{"role": message.role, "content": message.content} for message in problem.messages]
            rows.append({"index": index, "messages": messages, "answer": problem.answer})
        canonical = json.dumps(rows, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()

    def _check_index(self, index: object) -> int:
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < self._config.size:
            shown = repr(index) if isinstance(index, int) else type(index).__name__
            raise InvalidProblemId(f"{ENV_ID}: problem index {shown[:40]} is not an int in 0..{self._config.size - 1}")
        return int(index)

    def _entry(self, index: int) -> dict[str, Any]:
        """The reasoning-gym item at `index` (shared: callers copy before handing it on)."""
        with _GENERATION_LOCK:
            entry = self._entries.get(index)
            if entry is None:
                entry = self._built_locked()[index]
                self._entries[index] = entry
                if len(self._entries) > ENTRY_CACHE_SIZE:
                    self._entries.popitem(last=False)
            else:
                self._entries.move_to_end(index)
            return entry

    def _built(self) -> ProceduralDataset:
        with _GENERATION_LOCK:
            return self._built_locked()

    def _built_locked(self) -> ProceduralDataset:
        """Build the dataset on first use: a few tasks (acre, arc_agi) load data or draw `size` items
        up front, and `make` must stay fast for pools that only check a config."""
        if self._dataset is None:
            self._dataset = build_dataset(self._config)
        return self._dataset


def build_dataset(config: EnvConfig) -> ProceduralDataset:
    """reasoning-gym's dataset for a checked config: the task itself, or a `CompositeDataset`.

    The mix lists its tasks sorted by name, since CompositeDataset seeds the i-th with seed + i + 1.
    """
    if len(config.tasks) == 1:
        (name,) = config.tasks
        return reasoning_gym.create_dataset(name, seed=config.seed, size=config.size, **config.dataset_kwargs(name))
    specs = [
        DatasetSpec(name=name, weight=weight, config=config.dataset_kwargs(name))
        for name, weight in config.tasks.items()
    ]
    return CompositeDataset(CompositeConfig(size=config.size, seed=config.seed, datasets=specs))


def _json_safe_metadata(task: str, metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The item's metadata, keeping only the entries that survive a strict JSON round trip."""
    safe: dict[str, Any] = {"task": task}
    for key, value in metadata.items():
        if not isinstance(key, str) or key == "task":
            continue
        try:
            safe[key] = json.loads(json.dumps(value, allow_nan=False))
        except (TypeError, ValueError, RecursionError):
            continue
    return safe


def _package_version(distribution: str, fallback: str) -> str:
    """The installed distribution's version, from its metadata: reasoning-gym 0.1.25's own
    `__version__` still says 0.1.19, and this plugin may run from a source checkout."""
    try:
        return installed_version(distribution)
    except PackageNotFoundError:
        return fallback


def _text(exc: BaseException) -> str:
    """An exception's message, even when rendering it fails (its `__str__` is the library's code)."""
    try:
        return str(exc)
    except Exception:  # noqa: BLE001 - a detail must never turn a score into a crash
        return "(message not printable)"


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _DETAIL_CHARS else text[: _DETAIL_CHARS - 3] + "..."

"""A pool's spec: everything every role must agree on to produce and judge the same rollouts.

A pool trains one model on one task set with one way of prompting and generating. Each of those
choices changes tokens or rewards, and a worker and a validator that differ on any of them would
slash or be slashed for nothing. The spec writes them all down as canonical JSON, and its sha256
is what the pool commits to:

- `environment`: the task environment's id, version, config, the versions of the packages that
  make its problems and scores, and a digest of its problem data (`TaskEnvironment.describe`);
- `indices`: the problems the pool draws from (all of them, or the difficulty filter's list, by
  its count and sha256; the list itself is stored beside the spec), and how many of them are held
  out of every draw for the trainer's evaluation (`held_out`, absent when none);
- `model`: the base model's architecture and vocabulary, and where its files are (checkpoint
  version 0: a manifest hash to verify them by);
- `prompt`: chat-template variables (pinned, so a date-stamping template cannot differ between
  machines) and an optional template replacing the model's;
- `generation`: batch and group size, prompt and completion budgets, temperature, stop ids;
- `golden`: a few problems with the sha256 of their rendered prompt ids and completions with their
  scores. A role that renders or scores one differently has another tokenizer, template, task or
  scorer than the pool's: it must stop working on the pool, not slash anyone.

Pure: parsing, validation and hashing only. Building a spec (which loads the environment and the
tokenizer) lives in `proofpool.envs.spec`.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Final

from proofpool.core.assignment import MAX_COMPLETION_TOKENS, MAX_TEMPERATURE, MIN_TEMPERATURE
from proofpool.core.errors import ProofpoolError

SPEC_VERSION: Final = 1
NO_SPEC: Final = bytes(32)
"""The `specSha256` of a pool without a spec (any model URI but `spec://`): on-chain, in the
indexer's tables and in every rollout file for such a pool."""
MAX_PROMPT_TOKENS: Final = 131_072
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


class SpecError(ProofpoolError):
    """A spec is malformed, or disagrees with what a role computes from it."""


def canonical_json(value: Any) -> bytes:
    """The one serialization that is hashed: sorted keys, no spaces, UTF-8, no NaN or infinity."""
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
    except (TypeError, ValueError) as exc:
        raise SpecError(f"not canonical JSON: {exc}") from exc


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def ids_sha256(ids: Sequence[int]) -> str:
    """The digest of a list of token ids or problem indices (canonical JSON of the list)."""
    return sha256_hex(canonical_json([int(i) for i in ids]))


@dataclass(frozen=True)
class EnvironmentSpec:
    id: str
    version: str
    config: Mapping[str, Any]
    packages: Mapping[str, str]
    data_sha256: str


@dataclass(frozen=True)
class IndexSpec:
    """The problems the pool draws from: all `count` problems (`sha256` None), or the list whose
    digest is `sha256` (`ids_sha256`), stored beside the spec."""

    count: int
    sha256: str | None = None
    band: tuple[float, float] | None = None
    """The difficulty filter's pass-rate band that produced the list, for people (not checked)."""
    held_out: int = 0
    """Problems of the list no draw returns, chosen by sha256 of their ids
    (`proofpool.envs.tokenized.held_out_slice`): the trainer's held-out evaluation. Changes every
    draw, so it is pinned here. Left out of the JSON when 0, so specs written before the field
    existed keep their hash."""


@dataclass(frozen=True)
class ModelSpec:
    architecture: str
    vocab_size: int
    uri: str | None = None
    """Where the base model's checkpoint (version 0) is stored, e.g. `s3://bucket/pools/specs/<hash>/model/`."""
    manifest_sha256: str | None = None
    """The sha256 of its checkpoint manifest: the files are verified against it."""


@dataclass(frozen=True)
class PromptSpec:
    template_kwargs: Mapping[str, Any] = field(default_factory=dict)
    chat_template: str | None = None


@dataclass(frozen=True)
class GenerationSpec:
    batch_size: int
    group_size: int
    max_prompt_tokens: int
    max_tokens: int
    temperature: float
    stop_ids: tuple[int, ...]


@dataclass(frozen=True)
class GoldenVector:
    """One problem as the pool's creator rendered and scored it."""

    index: int
    prompt_sha256: str
    """`ids_sha256` of the rendered prompt ids."""
    prompt_tokens: int
    completion: str
    reward: float
    status: str


@dataclass(frozen=True)
class PoolSpec:
    environment: EnvironmentSpec
    indices: IndexSpec
    model: ModelSpec
    prompt: PromptSpec
    generation: GenerationSpec
    golden: tuple[GoldenVector, ...]
    spec_version: int = SPEC_VERSION

    def to_json(self) -> dict[str, Any]:
        """The spec as a JSON object (what `canonical_json` hashes)."""
        value = asdict(self)
        value["environment"]["config"] = dict(self.environment.config)
        value["environment"]["packages"] = dict(self.environment.packages)
        value["prompt"]["template_kwargs"] = dict(self.prompt.template_kwargs)
        value["indices"]["band"] = list(self.indices.band) if self.indices.band else None
        if not self.indices.held_out:
            del value["indices"]["held_out"]  # one canonical form: absent, never 0
        value["generation"]["stop_ids"] = list(self.generation.stop_ids)
        value["golden"] = [asdict(g) for g in self.golden]
        return value

    def canonical(self) -> bytes:
        return canonical_json(self.to_json())

    def sha256(self) -> str:
        """What the pool commits to (hex)."""
        return sha256_hex(self.canonical())


def parse_spec(data: bytes | str | Mapping[str, Any]) -> PoolSpec:
    """A spec from its JSON (bytes, text or parsed); `SpecError` naming the first bad field."""
    if isinstance(data, (bytes, str)):
        try:
            raw = json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise SpecError(f"spec is not JSON: {exc}") from exc
    else:
        raw = data
    r = _Reader(raw, "spec")
    version = r.int("spec_version", 1, 1_000)
    if version != SPEC_VERSION:
        raise SpecError(f"spec_version {version} is not supported (this proofpool reads version {SPEC_VERSION})")
    env, idx, model, prompt, gen = (r.child(k) for k in ("environment", "indices", "model", "prompt", "generation"))
    band = idx.optional("band", list)
    spec = PoolSpec(
        environment=EnvironmentSpec(
            id=env.str("id"),
            version=env.str("version"),
            config=env.get("config", dict),
            packages={k: _text(v, f"spec.environment.packages.{k}") for k, v in env.get("packages", dict).items()},
            data_sha256=env.hex64("data_sha256"),
        ),
        indices=IndexSpec(
            count=idx.int("count", 1, 100_000_000),
            sha256=idx.hex64("sha256") if idx.optional("sha256", str) is not None else None,
            band=_band(band) if band is not None else None,
            held_out=idx.int("held_out", 0, 100_000_000) if idx.optional("held_out", int) is not None else 0,
        ),
        model=ModelSpec(
            architecture=model.str("architecture"),
            vocab_size=model.int("vocab_size", 1, 10_000_000),
            uri=model.optional("uri", str),
            manifest_sha256=model.hex64("manifest_sha256") if model.optional("manifest_sha256", str) else None,
        ),
        prompt=PromptSpec(
            template_kwargs=prompt.get("template_kwargs", dict), chat_template=prompt.optional("chat_template", str)
        ),
        generation=GenerationSpec(
            batch_size=gen.int("batch_size", 1, 4096),
            group_size=gen.int("group_size", 1, 4096),
            max_prompt_tokens=gen.int("max_prompt_tokens", 1, MAX_PROMPT_TOKENS),
            max_tokens=gen.int("max_tokens", 1, MAX_COMPLETION_TOKENS),
            temperature=gen.float("temperature", MIN_TEMPERATURE, MAX_TEMPERATURE),
            stop_ids=tuple(gen.int_list("stop_ids")),
        ),
        golden=tuple(_golden(g, f"spec.golden[{i}]") for i, g in enumerate(r.get("golden", list))),
    )
    if not spec.generation.stop_ids or any(not 0 <= t < spec.model.vocab_size for t in spec.generation.stop_ids):
        raise SpecError(f"spec.generation.stop_ids must be ids below the vocabulary of {spec.model.vocab_size}")
    if (spec.model.uri is None) != (spec.model.manifest_sha256 is None):
        raise SpecError("spec.model.uri and spec.model.manifest_sha256 go together")
    if not spec.golden:
        raise SpecError("spec.golden holds no vector: roles could not check they render and score as the pool does")
    return spec


class _Reader:
    """Typed access to one JSON object, with the path of each field in the errors."""

    def __init__(self, raw: Any, path: str) -> None:
        if not isinstance(raw, dict):
            raise SpecError(f"{path} must be a JSON object")
        self.raw, self.path = raw, path

    def get(self, key: str, kind: type) -> Any:
        if key not in self.raw:
            raise SpecError(f"{self.path}.{key} is missing")
        value = self.raw[key]
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
            raise SpecError(f"{self.path}.{key} must be a {kind.__name__}")
        return value

    def optional(self, key: str, kind: type) -> Any:
        return None if self.raw.get(key) is None else self.get(key, kind)

    def child(self, key: str) -> _Reader:
        return _Reader(self.get(key, dict), f"{self.path}.{key}")

    def str(self, key: str) -> str:
        value = self.get(key, str)
        if not value:
            raise SpecError(f"{self.path}.{key} is empty")
        return value

    def int(self, key: str, low: int, high: int) -> int:
        value = self.get(key, int)
        if not low <= value <= high:
            raise SpecError(f"{self.path}.{key} must be in {low}..{high}, got {value}")
        return value

    def float(self, key: str, low: float, high: float) -> float:
        value = self.raw.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise SpecError(f"{self.path}.{key} must be a finite number")
        if not low <= value <= high:
            raise SpecError(f"{self.path}.{key} must be in {low}..{high}, got {value}")
        return float(value)

    def hex64(self, key: str) -> str:
        value = self.get(key, str)
        if not _HEX64.match(value):
            raise SpecError(f"{self.path}.{key} must be 64 lowercase hex digits")
        return value

    def int_list(self, key: str) -> list[int]:
        values = self.get(key, list)
        if any(isinstance(v, bool) or not isinstance(v, int) for v in values):
            raise SpecError(f"{self.path}.{key} must be a list of integers")
        return sorted(set(values))


def _text(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise SpecError(f"{path} must be a string")
    return value


def _band(values: list[Any]) -> tuple[float, float]:
    if (
        len(values) != 2
        or not all(isinstance(v, (int, float)) and 0 <= v <= 1 for v in values)
        or values[0] > values[1]
    ):
        raise SpecError("spec.indices.band must be [low, high] within 0..1")
    return float(values[0]), float(values[1])


def _golden(raw: Any, path: str) -> GoldenVector:
    r = _Reader(raw, path)
    return GoldenVector(
        index=r.int("index", 0, 100_000_000),
        prompt_sha256=r.hex64("prompt_sha256"),
        prompt_tokens=r.int("prompt_tokens", 1, MAX_PROMPT_TOKENS),
        completion=r.get("completion", str),
        reward=r.float("reward", 0.0, 1.0),
        status=r.str("status"),
    )

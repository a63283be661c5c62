"""A training pool's spec: everything members, validators and the aggregator must agree on.

A DiLoCo pool (INTELLECT-1) trains one base model on one tokenized dataset: each member runs
`inner.steps` AdamW steps from the round's checkpoint on its shard, uploads the quantized
pseudo-gradient, validators replay a sampled share, and the aggregator takes one outer Nesterov
step on the average. Every number here changes the tokens trained on, the pseudo-gradient or the
verdict, so a member and a validator that differed on any of them would slash or be slashed for
nothing. The spec writes them all down as canonical JSON; its sha256 is the pool's on-chain
`specSha256` and its model URI is `diloco://<sha256>`.

Pure and torch-free (the CLI and the backend read specs on a base install): parsing, validation
and hashing. The JSON is strict: unknown keys are refused (a typo would otherwise silently fall
back to a default), fields with a default may be left out, and `to_json` always writes every
field, so the hash is of one canonical form.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import MISSING, asdict, dataclass, fields
from typing import Any, Final

from proofpool.core.spec import MAX_PROMPT_TOKENS, ModelSpec, SpecError, _Reader, canonical_json, sha256_hex

KIND: Final = "diloco"
DILOCO_SPEC_VERSION: Final = 1
CODECS: Final = ("int8", "fp32")
MAX_ROWS_PER_ROUND: Final = 1 << 24
"""Bound on `inner.steps * inner.batch_size`: each row of a node's shard costs one sha256
(`proofpool.core.diloco.shard`), and validators recompute the shard of every file they replay."""


DilocoModel = ModelSpec
"""The base model, as an RL pool's spec names it: architecture, vocabulary, and where checkpoint
version 0 is stored (`uri`, filled when published) with its manifest hash to verify it by."""


@dataclass(frozen=True)
class DilocoData:
    sha256: str
    """Hex sha256 of the dataset file's bytes (`proofpool.training.dataset`)."""
    sequences: int
    seq_len: int
    eval_sequences: int
    """The last `eval_sequences` rows are held out: evaluation only, never in a shard."""
    uri: str | None = None
    """s3://bucket/key of the dataset file, filled when published."""
    name: str = ""
    """For people (e.g. "python-stdlib-3.13")."""


@dataclass(frozen=True)
class InnerSpec:
    """A member's H local AdamW steps (fresh optimizer each round, as in DiLoCo)."""

    steps: int
    batch_size: int
    lr: float
    warmup_steps: int = 0
    """Step i (from 0) runs at lr * min(1, (i + 1) / (warmup_steps + 1))."""
    weight_decay: float = 0.0
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    grad_clip: float = 0.0
    """0: none; else the gradient's global norm is clipped to this (`clip_grad_norm_`)."""


@dataclass(frozen=True)
class OuterSpec:
    """The aggregator's step on the averaged pseudo-gradient: SGD with Nesterov momentum
    (DiLoCo's and INTELLECT-1's outer optimizer: lr 0.7, momentum 0.9)."""

    lr: float = 0.7
    momentum: float = 0.9
    nesterov: bool = True
    clip_norm: float = 0.0
    """0: none; else the averaged pseudo-gradient's global L2 norm is clipped to this."""


@dataclass(frozen=True)
class CodecSpec:
    name: str = "int8"
    """"int8" (PRIME's uniform 8-bit codes with lookup tables) or "fp32" (unquantized: baselines)."""
    block_size: int = 0
    """0: one lookup table per tensor; else one per block of this many elements (int8 only)."""


@dataclass(frozen=True)
class RoundSpec:
    deadline_seconds: int
    """A round may close this long after its checkpoint was published ..."""
    min_contributors: int
    """... if at least this many files were accepted (before that: when every member has one)."""


@dataclass(frozen=True)
class ReplaySpec:
    sample_rate: float = 1.0
    """Share of files validators replay."""
    tolerance: float = 0.05
    """Largest relative L2 distance between a file's dequantized values and the fp32 replay."""


@dataclass(frozen=True)
class DilocoSpec:
    model: DilocoModel
    dataset: DilocoData
    inner: InnerSpec
    outer: OuterSpec
    codec: CodecSpec
    round: RoundSpec
    validation: ReplaySpec
    kind: str = KIND
    spec_version: int = DILOCO_SPEC_VERSION

    def to_json(self) -> dict[str, Any]:
        """The spec as a JSON object, every field written (what `canonical_json` hashes)."""
        return asdict(self)

    def canonical(self) -> bytes:
        return canonical_json(self.to_json())

    def sha256(self) -> str:
        """What the pool commits to (hex): its `specSha256` and its `diloco://` URI."""
        return sha256_hex(self.canonical())

    @property
    def work_units(self) -> int:
        """Tokens one member trains on per round: the `workUnits` of its `submitWork`."""
        return self.inner.steps * self.inner.batch_size * self.dataset.seq_len

    @property
    def training_rows(self) -> int:
        """Rows shards are drawn from: all but the held-out tail."""
        return self.dataset.sequences - self.dataset.eval_sequences

    @property
    def eval_rows(self) -> list[int]:
        """The held-out rows, the dataset's last `eval_sequences`: every role's evaluation, never in a shard."""
        return list(range(self.training_rows, self.dataset.sequences))


def spec_kind(data: bytes | str | Mapping[str, Any]) -> str:
    """ "diloco" for a training pool's spec, "rl" for an RL pool's (which has no "kind" key)."""
    raw = _load(data)
    if "kind" not in raw:
        return "rl"
    if raw["kind"] != KIND:
        raise SpecError(f"spec.kind must be {KIND!r} (or absent for an RL pool's spec), got {raw['kind']!r}")
    return KIND


def parse_diloco_spec(data: bytes | str | Mapping[str, Any]) -> DilocoSpec:
    """A training pool's spec from its JSON; `SpecError` naming the first bad or unknown field."""
    r = _Fields(_load(data), "spec", DilocoSpec)
    if r.get("kind", str) != KIND:
        raise SpecError(f"spec.kind must be {KIND!r}, got {r.raw['kind']!r}")
    version = r.int("spec_version", 1, 1_000)
    if version != DILOCO_SPEC_VERSION:
        raise SpecError(f"spec_version {version} is not supported (this proofpool reads version {DILOCO_SPEC_VERSION})")
    spec = DilocoSpec(
        model=_model(r.child_of("model", DilocoModel)),
        dataset=_data(r.child_of("dataset", DilocoData)),
        inner=_inner(r.child_of("inner", InnerSpec)),
        outer=_outer(r.child_of("outer", OuterSpec, optional=True)),
        codec=_codec(r.child_of("codec", CodecSpec, optional=True)),
        round=_round(r.child_of("round", RoundSpec)),
        validation=_replay(r.child_of("validation", ReplaySpec, optional=True)),
    )
    if spec.dataset.eval_sequences >= spec.dataset.sequences:
        raise SpecError("spec.dataset.eval_sequences must be below spec.dataset.sequences (no row left to train on)")
    if spec.inner.steps * spec.inner.batch_size > MAX_ROWS_PER_ROUND:
        raise SpecError(f"spec.inner.steps * spec.inner.batch_size must be at most {MAX_ROWS_PER_ROUND}")
    return spec


def _load(data: bytes | str | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(data, (bytes, str)):
        try:
            raw = json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise SpecError(f"spec is not JSON: {exc}") from exc
    else:
        raw = data
    if not isinstance(raw, Mapping):
        raise SpecError("spec must be a JSON object")
    return dict(raw)


class _Fields(_Reader):
    """A `_Reader` over one dataclass's JSON: refuses keys it does not know, and gives the
    dataclass default for a field left out."""

    def __init__(self, raw: Any, path: str, cls: type) -> None:
        super().__init__(raw, path)
        known = {f.name: f.default for f in fields(cls)}
        unknown = sorted(str(k) for k in raw if k not in known)
        if unknown:
            raise SpecError(f"{path}.{unknown[0]} is not a known field")
        self.defaults = {k: v for k, v in known.items() if v is not MISSING}

    def child_of(self, key: str, cls: type, *, optional: bool = False) -> _Fields:
        """The object at `key`; when `optional`, an absent one means every field's default."""
        raw = {} if optional and key not in self.raw else self.get(key, dict)
        return _Fields(raw, f"{self.path}.{key}", cls)

    def field(self, key: str, read: Callable[..., Any], *bounds: Any) -> Any:
        """`read(key, *bounds)`, or the default when the key is absent."""
        if key not in self.raw and key in self.defaults:
            return self.defaults[key]
        return read(key, *bounds)

    def above(self, key: str, low: float, high: float) -> float:
        """A number in (low, high]."""
        value = self.float(key, low, high)
        if value <= low:
            raise SpecError(f"{self.path}.{key} must be above {low}, got {value}")
        return value

    def below(self, key: str, low: float, high: float) -> float:
        """A number in [low, high)."""
        value = self.float(key, low, high)
        if value >= high:
            raise SpecError(f"{self.path}.{key} must be below {high}, got {value}")
        return value

    def hex_or_none(self, key: str) -> str | None:
        return None if self.raw.get(key) is None else self.hex64(key)

    def text_or_none(self, key: str) -> str | None:
        return None if self.raw.get(key) is None else self.str(key)


def _model(r: _Fields) -> DilocoModel:
    model = DilocoModel(
        architecture=r.str("architecture"),
        vocab_size=r.int("vocab_size", 1, 10_000_000),
        uri=r.text_or_none("uri"),
        manifest_sha256=r.hex_or_none("manifest_sha256"),
    )
    if (model.uri is None) != (model.manifest_sha256 is None):
        raise SpecError("spec.model.uri and spec.model.manifest_sha256 go together")
    return model


def _data(r: _Fields) -> DilocoData:
    return DilocoData(
        sha256=r.hex64("sha256"),
        sequences=r.int("sequences", 1, 1_000_000_000),
        seq_len=r.int("seq_len", 2, MAX_PROMPT_TOKENS),
        eval_sequences=r.int("eval_sequences", 0, 1_000_000_000),
        uri=r.text_or_none("uri"),
        name=r.field("name", r.get, str),
    )


def _inner(r: _Fields) -> InnerSpec:
    return InnerSpec(
        steps=r.int("steps", 1, 100_000),
        batch_size=r.int("batch_size", 1, 65_536),
        lr=r.above("lr", 0.0, 10.0),
        warmup_steps=r.field("warmup_steps", r.int, 0, 100_000),
        weight_decay=r.field("weight_decay", r.float, 0.0, 10.0),
        beta1=r.field("beta1", r.below, 0.0, 1.0),
        beta2=r.field("beta2", r.below, 0.0, 1.0),
        eps=r.field("eps", r.above, 0.0, 1.0),
        grad_clip=r.field("grad_clip", r.float, 0.0, 1e9),
    )


def _outer(r: _Fields) -> OuterSpec:
    return OuterSpec(
        lr=r.field("lr", r.above, 0.0, 10.0),
        momentum=r.field("momentum", r.below, 0.0, 1.0),
        nesterov=r.field("nesterov", r.get, bool),
        clip_norm=r.field("clip_norm", r.float, 0.0, 1e9),
    )


def _codec(r: _Fields) -> CodecSpec:
    codec = CodecSpec(name=r.field("name", r.get, str), block_size=r.field("block_size", r.int, 0, 1 << 30))
    if codec.name not in CODECS:
        raise SpecError(f"spec.codec.name must be one of {', '.join(CODECS)}, got {codec.name!r}")
    if codec.name == "fp32" and codec.block_size:
        raise SpecError("spec.codec.block_size must be 0 for the fp32 codec (it has no blocks)")
    return codec


def _round(r: _Fields) -> RoundSpec:
    return RoundSpec(
        deadline_seconds=r.int("deadline_seconds", 1, 31_536_000),
        min_contributors=r.int("min_contributors", 1, 1_000_000),
    )


def _replay(r: _Fields) -> ReplaySpec:
    return ReplaySpec(
        sample_rate=r.field("sample_rate", r.float, 0.0, 1.0),
        tolerance=r.field("tolerance", r.above, 0.0, 1.0),
    )

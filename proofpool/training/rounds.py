"""DiLoCo rounds as checkpoints: which checkpoint a round starts from, the outer step, and the
checkpoint it publishes.

Round r trains from checkpoint version r: version 0 is the spec's base model (verified against the
manifest hash the spec records), a version r >= 1 is what the pool's aggregator published on-chain
(verified against the manifest hash in `CheckpointPublished`: a manifest the chain does not anchor
is never trusted). Closing round r, the aggregator averages the accepted pseudo-gradients in work
key order, optionally clips the average, and takes one outer Nesterov SGD step with the momentum
carried by checkpoint r (`outer_round`, the one implementation: `proofpool ledger verify-round`
recomputes the same step from the chain and the store). Checkpoint r+1 is a Hugging Face model
directory with fp32 weights plus two files the manifest lists like any other:

- `diloco-momentum.tensors`: the outer momentum (safetensors bytes, float32, one tensor per
  parameter; absent in version 0, where the momentum is zero). Not named `.safetensors`, so the
  checkpoint writer carries it along instead of taking it for weights;
- `diloco-round.json`: the round record (canonical JSON): the version trained from and its manifest,
  the work keys averaged in order, their nodes, the outer hyperparameters and the delta's norm.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from proofpool.core.diloco.outer import average, clip_global_norm, outer_step
from proofpool.core.diloco.spec import DilocoSpec, OuterSpec
from proofpool.core.errors import ProofpoolError
from proofpool.core.spec import SpecError, canonical_json
from proofpool.infra.checkpoint.anchor import ensure_published_checkpoint
from proofpool.infra.checkpoint.fetch import ensure_checkpoint
from proofpool.infra.checkpoint.manifest import MANIFEST_NAME
from proofpool.infra.checkpoint.metrics import METRICS_NAME
from proofpool.infra.storage import ObjectStore
from proofpool.training.inner import load_model

if TYPE_CHECKING:
    import torch

    from proofpool.core.diloco.update_file import Update
    from proofpool.infra.chain.client import ChainClient

MOMENTUM_FILE: Final = "diloco-momentum.tensors"
"""The outer momentum of a checkpoint (safetensors bytes); absent in version 0 (momentum zero)."""
ROUND_FILE: Final = "diloco-round.json"
"""The record of the round that made a checkpoint (canonical JSON of `RoundRecord.to_json`)."""
ROUND_KIND: Final = "diloco-round"
MAX_ROUND_BYTES: Final = 64 * 2**20
"""A record lists one 64-hex work key and one address per contributor: far below this."""
_HEX64 = re.compile(r"[0-9a-f]{64}")
_ADDRESS = re.compile(r"0x[0-9a-fA-F]{40}")
_WEIGHT_SUFFIXES: Final = (".safetensors", ".safetensors.index.json", ".bin", ".pt", ".pth", ".ckpt", ".pkl")
_OUR_FILES: Final = frozenset({MOMENTUM_FILE, ROUND_FILE, MANIFEST_NAME, METRICS_NAME})


class RoundError(ProofpoolError):
    """A round's inputs or a checkpoint's round files are inconsistent (names, shapes, records)."""


@dataclass(frozen=True)
class RoundRecord:
    """What checkpoint `version` was made from: enough for anyone to recompute its outer step."""

    pool_id: int
    round: int
    """The version the round trained from."""
    version: int
    """This checkpoint's version: round + 1."""
    previous_manifest_sha256: str
    """Hex manifest sha256 of checkpoint `round`."""
    included: tuple[str, ...]
    """Work keys (hex, no 0x), sorted: the files averaged, in that order."""
    contributors: tuple[str, ...]
    """The nodes of those files (checksummed), in the same order."""
    outer: OuterSpec
    delta_norm: float
    """Global L2 norm of the averaged pseudo-gradient, before clipping."""

    def __post_init__(self) -> None:
        if self.pool_id < 0 or self.round < 0 or self.version != self.round + 1:
            raise RoundError(f"record of pool {self.pool_id}: version {self.version} must be round {self.round} + 1")
        if not _HEX64.fullmatch(self.previous_manifest_sha256):
            raise RoundError(f"previous_manifest_sha256 {self.previous_manifest_sha256!r} is not 64 hex digits")
        if not self.included or len(self.included) != len(self.contributors):
            raise RoundError(f"{len(self.included)} work keys for {len(self.contributors)} contributors")
        if any(not _HEX64.fullmatch(key) for key in self.included) or list(self.included) != sorted(set(self.included)):
            raise RoundError("included must be distinct lower-case hex work keys in sorted order")
        if any(not isinstance(node, str) or not _ADDRESS.fullmatch(node) for node in self.contributors):
            raise RoundError("every contributor must be an address")

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": ROUND_KIND,
            "pool_id": self.pool_id,
            "round": self.round,
            "version": self.version,
            "previous_manifest_sha256": self.previous_manifest_sha256,
            "included": list(self.included),
            "contributors": list(self.contributors),
            "outer": asdict(self.outer),
            "delta_norm": self.delta_norm,
        }

    def to_bytes(self) -> bytes:
        """The record as stored in `ROUND_FILE`: canonical JSON."""
        return canonical_json(self.to_json())

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | bytes | str) -> RoundRecord:
        """The record in `data`; `RoundError` for anything but exactly the shape `to_json` writes."""
        try:
            raw = json.loads(data) if isinstance(data, bytes | str) else dict(data)
        except (ValueError, RecursionError) as exc:
            raise RoundError(f"round record is not JSON: {exc}") from exc
        expected = {"kind", "pool_id", "round", "version", "previous_manifest_sha256", "included", "contributors"}
        expected |= {"outer", "delta_norm"}
        if not isinstance(raw, dict) or set(raw) != expected or raw["kind"] != ROUND_KIND:
            raise RoundError(f"a round record is a {ROUND_KIND!r} object with exactly the keys {sorted(expected)}")
        outer = raw["outer"]
        if not isinstance(outer, dict) or set(outer) != {"lr", "momentum", "nesterov", "clip_norm"}:
            raise RoundError("round record: outer must hold exactly lr, momentum, nesterov and clip_norm")
        numbers = [outer["lr"], outer["momentum"], outer["clip_norm"], raw["delta_norm"]]
        if any(type(n) not in (int, float) for n in numbers) or type(outer["nesterov"]) is not bool:
            raise RoundError("round record: outer values and delta_norm must be numbers (nesterov a boolean)")
        integers = [raw["pool_id"], raw["round"], raw["version"]]
        lists = [raw["included"], raw["contributors"]]
        if any(type(n) is not int for n in integers) or any(not isinstance(items, list) for items in lists):
            raise RoundError("round record: pool_id, round and version must be integers; included, contributors lists")
        if not isinstance(raw["previous_manifest_sha256"], str) or any(type(k) is not str for k in raw["included"]):
            raise RoundError("round record: manifest hash and work keys must be strings")
        return cls(
            pool_id=raw["pool_id"],
            round=raw["round"],
            version=raw["version"],
            previous_manifest_sha256=raw["previous_manifest_sha256"],
            included=tuple(raw["included"]),
            contributors=tuple(raw["contributors"]),
            outer=OuterSpec(
                lr=float(outer["lr"]),
                momentum=float(outer["momentum"]),
                nesterov=outer["nesterov"],
                clip_norm=float(outer["clip_norm"]),
            ),
            delta_norm=float(raw["delta_norm"]),
        )


def round_checkpoint(
    client: ChainClient | None,
    store: ObjectStore,
    spec: DilocoSpec,
    pool_id: int,
    version: int,
    cache_dir: Path,
    relays: Sequence[str] = (),
    *,
    max_bytes: int | None = None,
) -> Path:
    """The local model directory of checkpoint `version` of training pool `pool_id`, verified:
    version 0 against the base model's manifest hash in the (hash-checked) spec, a later version
    against the manifest hash published on-chain (`CheckpointError("not_on_chain")` when there is
    none; `client` may be None only for version 0)."""
    if version < 0:
        raise ValueError(f"checkpoint versions start at 0, not {version}")
    if version == 0:
        if spec.model.uri is None or spec.model.manifest_sha256 is None:
            raise SpecError("the spec names no stored base model (model.uri): it was never published")
        return ensure_checkpoint(
            store,
            spec.model.uri,
            bytes.fromhex(spec.model.manifest_sha256),
            Path(cache_dir),
            relays=relays,
            max_bytes=max_bytes,
        )
    if client is None:
        raise ValueError(f"checkpoint {version} is anchored on-chain: a chain client is needed to trust it")
    return ensure_published_checkpoint(
        client, store, pool_id, version, Path(cache_dir), relays=relays, max_bytes=max_bytes
    )


def read_weights(checkpoint_dir: Path) -> dict[str, torch.Tensor]:
    """The float32 named parameters of the model in `checkpoint_dir` (tied weights once)."""
    model = load_model(Path(checkpoint_dir))
    return {name: parameter.detach() for name, parameter in model.named_parameters()}


def read_momentum(checkpoint_dir: Path) -> dict[str, torch.Tensor] | None:
    """The outer momentum a checkpoint carries, or None when it has none (version 0)."""
    import torch
    from safetensors import SafetensorError
    from safetensors.torch import load

    path = Path(checkpoint_dir) / MOMENTUM_FILE
    if not path.is_file():
        return None
    try:
        tensors = load(path.read_bytes())
    except (SafetensorError, ValueError, RuntimeError, OverflowError) as exc:
        raise RoundError(f"{path} is not a safetensors file: {exc}") from exc
    wrong = sorted(name for name, tensor in tensors.items() if tensor.dtype != torch.float32)
    if wrong or not tensors:
        raise RoundError(f"{path} must hold float32 tensors (not: {wrong or 'none at all'})")
    return tensors


def read_round_record(checkpoint_dir: Path) -> RoundRecord | None:
    """The record of the round that made a checkpoint, or None when it has none (version 0)."""
    path = Path(checkpoint_dir) / ROUND_FILE
    if not path.is_file():
        return None
    if path.stat().st_size > MAX_ROUND_BYTES:
        raise RoundError(f"{path} is over {MAX_ROUND_BYTES} bytes")
    return RoundRecord.from_json(path.read_bytes())


def write_round_checkpoint(
    previous_dir: Path,
    weights: Mapping[str, torch.Tensor],
    momentum: Mapping[str, torch.Tensor],
    record: RoundRecord,
    out_dir: Path,
) -> None:
    """Write checkpoint `record.version` into `out_dir` (absent or empty; complete or absent after):
    the previous checkpoint's model with `weights` loaded, saved fp32 as safetensors, its other files
    (config, tokenizer, ...) copied unchanged, and the momentum and round record beside them. The
    directory is what `proofpool.infra.checkpoint.publish_checkpoint` publishes."""
    import torch
    from safetensors.torch import save

    out_dir = Path(out_dir)
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise RoundError(f"output directory {out_dir} exists and is not empty")
    model = load_model(Path(previous_dir))
    parameters = dict(model.named_parameters())
    shapes = {name: tuple(parameter.shape) for name, parameter in parameters.items()}
    check_tensors("weights", weights, shapes)
    check_tensors("momentum", momentum, shapes)
    with torch.no_grad():
        for name, parameter in parameters.items():
            parameter.copy_(weights[name])
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}-", dir=out_dir.parent))
    try:
        model.save_pretrained(str(staging))
        for path in sorted(Path(previous_dir).iterdir()):
            name = path.name
            ours = name.startswith(".") or name in _OUR_FILES or name.endswith(_WEIGHT_SUFFIXES)
            if path.is_file() and not ours:
                shutil.copyfile(path, staging / name)  # the previous config too: the same bytes every version
        moments = {name: momentum[name].detach().to("cpu", torch.float32).contiguous() for name in shapes}
        (staging / MOMENTUM_FILE).write_bytes(save(moments, metadata={"format": "pt"}))
        (staging / ROUND_FILE).write_bytes(record.to_bytes())
        if out_dir.exists():
            out_dir.rmdir()
        staging.rename(out_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def outer_round(
    previous_dir: Path,
    updates: Sequence[tuple[str, Update]],
    spec: DilocoSpec,
    pool_id: int,
    round: int,
    previous_manifest_sha256: str,
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], RoundRecord]:
    """THE outer step of round `round` (the aggregator's and `ledger verify-round`'s): the updates
    (work key, file) sorted by work key, dequantized, averaged, clipped to `spec.outer.clip_norm`,
    and one outer SGD step from checkpoint `round` (in `previous_dir`) with its momentum.
    Returns (new weights, new momentum, the round record), all float32."""
    if not updates:
        raise RoundError(f"round {round} of pool {pool_id} has no update to average")
    keyed = sorted(((normalize_work_key(key), update) for key, update in updates), key=lambda item: item[0])
    keys = [key for key, _ in keyed]
    if len(set(keys)) != len(keys):
        raise RoundError(f"round {round}: a work key appears twice among the updates")
    for key, update in keyed:
        if update.meta.pool_id != pool_id or update.meta.round != round:
            raise RoundError(
                f"update {key} is of pool {update.meta.pool_id} round {update.meta.round}, "
                f"not pool {pool_id} round {round}"
            )
    weights = read_weights(Path(previous_dir))
    shapes = {name: tuple(tensor.shape) for name, tensor in weights.items()}
    deltas = []
    for key, update in keyed:
        delta = update.dequantized()
        check_tensors(f"update {key}", delta, shapes)
        deltas.append(delta)
    momentum = read_momentum(Path(previous_dir))
    if momentum is not None:
        check_tensors(f"the momentum of {previous_dir}", momentum, shapes)
    clipped, norm = clip_global_norm(average(deltas), spec.outer.clip_norm)
    new_weights, new_momentum = outer_step(weights, momentum, clipped, spec.outer)
    record = RoundRecord(
        pool_id=pool_id,
        round=round,
        version=round + 1,
        previous_manifest_sha256=normalize_work_key(previous_manifest_sha256),
        included=tuple(keys),
        contributors=tuple(update.meta.node for _, update in keyed),
        outer=spec.outer,
        delta_norm=float(norm),
    )
    return new_weights, new_momentum, record


def normalize_work_key(key: str) -> str:
    """A work key (or other sha256) as 64 lower-case hex digits without 0x; `RoundError` otherwise."""
    value = key.lower().removeprefix("0x") if isinstance(key, str) else ""
    if not _HEX64.fullmatch(value):
        raise RoundError(f"{key!r} is not a sha256 (64 hex digits)")
    return value


def check_tensors(what: str, tensors: Mapping[str, torch.Tensor], shapes: Mapping[str, tuple[int, ...]]) -> None:
    """`RoundError` unless `tensors` has exactly the names of `shapes`, each of that shape."""
    if set(tensors) != set(shapes):
        missing, extra = sorted(set(shapes) - set(tensors)), sorted(set(tensors) - set(shapes))
        raise RoundError(f"{what}: parameters missing {missing[:3]}, unknown {extra[:3]}")
    wrong = [name for name, shape in shapes.items() if tuple(tensors[name].shape) != shape]
    if wrong:
        name = wrong[0]
        raise RoundError(f"{what}: {name} is {list(tensors[name].shape)}, the model's is {list(shapes[name])}")

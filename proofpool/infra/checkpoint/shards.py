"""Write a checkpoint: a model directory with sharded safetensors weights and a manifest.

The output is a plain Hugging Face model directory that vLLM and transformers load as is:
`config.json`, the weights as `model.safetensors` (one shard) or `model-0000i-of-0000n.safetensors`
plus the standard `model.safetensors.index.json`, the tokenizer files, `proofpool-model.json`,
the trainer's figures when it gives them (`proofpool-metrics.json`, see `metrics.py`), and the
manifest (`proofpool-checkpoint.json`) that lists every other file with its sha256.

Sharding is ours rather than transformers', and deterministic: tensors in natural name order
(`layers.2` before `layers.10`), packed greedily up to the shard size. The same weights
therefore always give the same shard bytes, whether they come from a directory or from a
model in memory, so a worker's cache re-downloads only the shards whose tensors changed, and
config and tokenizer files (unchanged between versions) never.

The publisher passes a directory (its weights are copied in their own dtype); the trainer
passes its model in memory (weights written as bf16, the dtype vLLM runs and proofs commit to,
without touching the caller's model) with `assets_dir`, the directory it started from, for
the tokenizer files and `proofpool-model.json`.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from proofpool.infra.checkpoint.errors import CheckpointError, Reason
from proofpool.infra.checkpoint.manifest import MANIFEST_NAME, CheckpointManifest, check_file_name, manifest_of_files
from proofpool.infra.checkpoint.metrics import METRICS_NAME, CheckpointMetrics

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel

DEFAULT_SHARD_SIZE: Final = 50_000_000
"""50 MB per shard: small enough to retry cheaply, large enough to keep the file count low."""
WEIGHTS_NAME: Final = "model.safetensors"
INDEX_NAME: Final = "model.safetensors.index.json"
MODEL_CONFIG_FILES: Final = frozenset({"config.json", "generation_config.json"})
"""Files that describe the weights: taken from the model, never from `assets_dir`."""
_PICKLE_SUFFIXES: Final = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
"""Pickled weights run code when loaded: never published, even next to safetensors."""
_MAX_HEADER: Final = 100_000_000


@dataclass(frozen=True)
class _Tensor:
    """Where one tensor of the source lives, and how many bytes it takes."""

    name: str
    file: Path
    nbytes: int


def _invalid(detail: str) -> CheckpointError:
    return CheckpointError(Reason.SOURCE_INVALID, detail)


def write_checkpoint(
    source: Path | str | PreTrainedModel,
    out_dir: Path,
    shard_size_bytes: int = DEFAULT_SHARD_SIZE,
    *,
    pool_id: int,
    version: int,
    assets_dir: Path | None = None,
    metrics: CheckpointMetrics | None = None,
) -> CheckpointManifest:
    """Write `source` (a model directory or an in-memory model) as checkpoint `version` of
    `pool_id` into `out_dir` and return its manifest (also written as `out_dir/MANIFEST_NAME`).

    `metrics`, the figures of the step that made this checkpoint, is written as `METRICS_NAME` and
    listed in the manifest; a metrics file in the source (a fetched checkpoint published again) is
    never carried over, since its figures describe another version.

    `out_dir` must not exist yet (or be empty): the checkpoint is built in a temporary sibling
    and renamed into place, so `out_dir` is either complete or absent. A tensor larger than
    `shard_size_bytes` gets a shard of its own. `CheckpointError("source_invalid")` when the
    source holds no config or no safetensors weights, or a file name a manifest cannot list.
    """
    if shard_size_bytes < 1:
        raise ValueError(f"shard_size_bytes must be >= 1, not {shard_size_bytes}")
    if metrics is not None and (metrics.pool_id, metrics.version) != (pool_id, version):
        given = f"pool {metrics.pool_id} version {metrics.version}"
        raise ValueError(f"metrics of {given} given for checkpoint {version} of pool {pool_id}")
    out_dir = Path(out_dir)
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise _invalid(f"output directory {out_dir} exists and is not empty")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}-", dir=out_dir.parent))
    try:
        weights_dir, extra_files = _source_directories(source, staging, assets_dir)
        built = staging / "checkpoint"
        built.mkdir()
        _write_shards(_list_tensors(weights_dir), built, shard_size_bytes)
        for path in extra_files:
            shutil.copyfile(path, built / path.name)
        if metrics is not None:
            (built / METRICS_NAME).write_bytes(metrics.to_bytes())
        manifest = manifest_of_files(pool_id, version, sorted(built.iterdir()))
        (built / MANIFEST_NAME).write_bytes(manifest.to_bytes())
        if out_dir.exists():
            out_dir.rmdir()
        built.rename(out_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return manifest


def _source_directories(
    source: Path | str | PreTrainedModel, staging: Path, assets_dir: Path | None
) -> tuple[Path, list[Path]]:
    """(directory holding the weights, the other files to copy) for either kind of source; an
    in-memory model is saved under `staging` first."""
    if isinstance(source, str | os.PathLike):
        directory = Path(source)
        if not (directory / "config.json").is_file():
            raise _invalid(f"{directory} is not a model directory (no config.json)")
        return directory, _other_files(directory)
    if not hasattr(source, "save_pretrained") or not hasattr(source, "state_dict"):
        raise TypeError(f"source must be a model directory or a transformers model, not {type(source).__name__}")
    if assets_dir is None or not Path(assets_dir).is_dir():
        raise _invalid("an in-memory model needs assets_dir: the directory with its tokenizer files")
    saved = staging / "model"
    _save_model_bf16(source, saved)
    own = _other_files(saved)
    names = {path.name for path in own}
    assets = [p for p in _other_files(Path(assets_dir)) if p.name not in MODEL_CONFIG_FILES and p.name not in names]
    return saved, own + assets


def _other_files(directory: Path) -> list[Path]:
    """Top-level files of a model directory other than weights, pickles, hidden files, a manifest
    and a metrics file (a fetched checkpoint can be published again as is)."""
    out = []
    for path in sorted(directory.iterdir()):
        name = path.name
        if not path.is_file() or name.startswith(".") or name in (MANIFEST_NAME, METRICS_NAME):
            continue
        if name.endswith((".safetensors", ".safetensors.index.json", *_PICKLE_SUFFIXES)):
            continue
        try:
            check_file_name(name)
        except CheckpointError as exc:
            raise _invalid(f"{path} cannot be published: {exc.detail}") from exc
        out.append(path)
    return out


def _save_model_bf16(model: PreTrainedModel, out: Path) -> None:
    """`model` saved with transformers (which knows its tied weights) as bf16, leaving the
    caller's model, its parameters and its config as they were."""
    import torch

    state = _bf16_state_dict(model.state_dict())
    config_dtype = model.config.dtype
    try:
        model.save_pretrained(str(out), state_dict=state)  # writes config.dtype from the live parameters
    finally:
        model.config.dtype = config_dtype
    config = copy.deepcopy(model.config)
    config.dtype = torch.bfloat16
    config.save_pretrained(str(out))  # the config of the weights actually written


def _bf16_state_dict(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Floating tensors as bf16 copies on the CPU; tensors that shared memory (tied weights)
    still share it, so transformers can recognize and drop the duplicates."""
    import torch

    converted: dict[tuple[int, int, tuple[int, ...], tuple[int, ...]], torch.Tensor] = {}
    out = {}
    for name, tensor in state.items():
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape), tensor.stride())
        if key not in converted:
            value = tensor.detach().to("cpu")
            converted[key] = value.to(torch.bfloat16) if value.is_floating_point() else value
        out[name] = converted[key]
    return out


def _list_tensors(directory: Path) -> list[_Tensor]:
    """Every tensor of the safetensors weights in `directory`, in natural name order."""
    index = directory / INDEX_NAME
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
            files = sorted({directory / check_file_name(name) for name in weight_map.values()})
        except (ValueError, KeyError, TypeError, AttributeError, CheckpointError) as exc:
            raise _invalid(f"{index} is not a safetensors index: {exc}") from exc
    elif (directory / WEIGHTS_NAME).is_file():
        files = [directory / WEIGHTS_NAME]
    else:
        raise _invalid(f"no safetensors weights in {directory} ({WEIGHTS_NAME} or {INDEX_NAME})")
    tensors: dict[str, _Tensor] = {}
    for file in files:
        for name, nbytes in _read_header(file).items():
            if name in tensors:
                raise _invalid(f"tensor {name!r} is in both {tensors[name].file.name} and {file.name}")
            tensors[name] = _Tensor(name, file, nbytes)
    if not tensors:
        raise _invalid(f"the weights in {directory} hold no tensor")
    return sorted(tensors.values(), key=lambda t: _natural_key(t.name))


def _read_header(file: Path) -> dict[str, int]:
    """{tensor name: byte size} from a safetensors header, without loading any tensor."""
    try:
        with file.open("rb") as handle:
            length = int.from_bytes(handle.read(8), "little")
            if not 2 <= length <= _MAX_HEADER:
                raise ValueError(f"header length {length}")
            header = json.loads(handle.read(length))
        return {
            name: int(entry["data_offsets"][1]) - int(entry["data_offsets"][0])
            for name, entry in header.items()
            if name != "__metadata__"
        }
    except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
        raise _invalid(f"{file} is not a safetensors file: {exc}") from exc


def _natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that orders the digits in a name by value: `layers.2` before `layers.10`."""
    return tuple((0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", name) if part)


def plan_shards(tensors: list[_Tensor], shard_size_bytes: int) -> list[list[_Tensor]]:
    """Greedy packing in order: a shard takes tensors until the next one would overflow it."""
    shards: list[list[_Tensor]] = []
    current: list[_Tensor] = []
    size = 0
    for tensor in tensors:
        if current and size + tensor.nbytes > shard_size_bytes:
            shards.append(current)
            current, size = [], 0
        current.append(tensor)
        size += tensor.nbytes
    if current:
        shards.append(current)
    return shards


def shard_name(index: int, count: int) -> str:
    """`model.safetensors` for a single shard, else transformers' `model-0000i-of-0000n.safetensors`."""
    return WEIGHTS_NAME if count == 1 else f"model-{index + 1:05d}-of-{count:05d}.safetensors"


def _write_shards(tensors: list[_Tensor], out: Path, shard_size_bytes: int) -> None:
    """Write the planned shards (loading one shard's tensors at a time) and, if more than one,
    the index that maps each tensor to its shard."""
    from safetensors import SafetensorError, safe_open
    from safetensors.torch import save_file

    shards = plan_shards(tensors, shard_size_bytes)
    weight_map: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        handles: dict[Path, object] = {}
        try:
            for index, shard in enumerate(shards):
                name = shard_name(index, len(shards))
                loaded = {}
                for tensor in shard:
                    if tensor.file not in handles:
                        handles[tensor.file] = stack.enter_context(safe_open(str(tensor.file), framework="pt"))
                    loaded[tensor.name] = handles[tensor.file].get_tensor(tensor.name)  # type: ignore[attr-defined]
                    weight_map[tensor.name] = name
                save_file(loaded, str(out / name), metadata={"format": "pt"})
                del loaded
        except (SafetensorError, OSError, ValueError) as exc:
            raise _invalid(f"cannot read the source weights: {exc}") from exc
    if len(shards) > 1:
        index = {"metadata": {"total_size": sum(t.nbytes for t in tensors)}, "weight_map": weight_map}
        (out / INDEX_NAME).write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")

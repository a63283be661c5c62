"""A training pool's dataset: one safetensors file of token rows, named by the sha256 of its bytes.

Every role must train on, replay and evaluate exactly the same tokens, so the dataset is not text
plus a tokenizer (whose versions drift) but the token ids themselves: one tensor `tokens`, int32
`[sequences, seq_len]`, and the metadata `{"proofpool": <canonical JSON {"kind": "diloco-dataset",
"name", "sequences", "seq_len"}>}`. The pool's spec records the file's sha256 (`DilocoData.sha256`);
a file whose bytes hash to anything else is refused before it is parsed.

Reading is strict (the bytes come from the object store): anything but exactly that one tensor with
the dtype, shape and metadata above is a `DatasetError` with a reason code, never another exception.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from proofpool.core.diloco.spec import DilocoData
from proofpool.core.errors import ProofpoolError
from proofpool.core.spec import SpecError, canonical_json

if TYPE_CHECKING:
    import torch

DATASET_KIND: Final = "diloco-dataset"
TOKENS: Final = "tokens"
"""The one tensor of a dataset file."""
METADATA_KEY: Final = "proofpool"
MAX_HEADER_BYTES: Final = 1 << 20
"""A dataset's header names one tensor: a few hundred bytes."""
MAX_TOKEN_ID: Final = 2**31 - 1


class DatasetError(ProofpoolError):
    """A dataset file or token tensor is refused; `reason` says why (a closed set of codes):
    `empty`, `no_eos`, `bad_tokens`, `not_safetensors`, `bad_metadata`, `wrong_tensors`,
    `wrong_shape`, `wrong_dtype`, `token_out_of_range`, `sha256_mismatch`, `missing`."""

    def __init__(self, reason: str, detail: str) -> None:
        self.reason = reason
        self.detail = detail
        super().__init__(f"{reason}: {detail}")


def pack_texts(texts: Iterable[str], tokenizer: Any, seq_len: int) -> torch.Tensor:
    """Token rows of `texts`: each text encoded without special tokens and followed by the
    tokenizer's end-of-sequence id, all concatenated and cut into full rows of `seq_len` tokens
    (the tail that does not fill a row is dropped). int32 `[rows, seq_len]`."""
    import torch

    if seq_len < 2:
        raise DatasetError("bad_tokens", f"seq_len must be >= 2 (a row predicts its next tokens), not {seq_len}")
    eos = getattr(tokenizer, "eos_token_id", None)
    if not isinstance(eos, int):
        raise DatasetError("no_eos", "the tokenizer has no end-of-sequence token to separate texts")
    ids: list[int] = []
    for text in texts:
        ids.extend(tokenizer.encode(text, add_special_tokens=False))
        ids.append(eos)
    rows = len(ids) // seq_len
    if rows == 0:
        raise DatasetError("empty", f"{len(ids)} tokens make no full row of {seq_len}")
    return torch.tensor(ids[: rows * seq_len], dtype=torch.int32).view(rows, seq_len)


def dataset_bytes(tokens: torch.Tensor, name: str = "") -> bytes:
    """The dataset file of `tokens` (2-D, integer, ids in 0..2**31-1) as bytes: same tokens and
    name, same bytes."""
    import torch
    from safetensors.torch import save

    if tokens.dim() != 2 or tokens.shape[0] < 1 or tokens.shape[1] < 2:
        raise DatasetError("wrong_shape", f"tokens must be [sequences >= 1, seq_len >= 2], not {list(tokens.shape)}")
    if tokens.dtype.is_floating_point or tokens.dtype.is_complex or tokens.dtype == torch.bool:
        raise DatasetError("wrong_dtype", f"tokens must be integers, not {tokens.dtype}")
    if int(tokens.min()) < 0 or int(tokens.max()) > MAX_TOKEN_ID:
        raise DatasetError("token_out_of_range", f"token ids must lie in 0..{MAX_TOKEN_ID}")
    sequences, seq_len = (int(n) for n in tokens.shape)
    meta = {"kind": DATASET_KIND, "name": str(name), "sequences": sequences, "seq_len": seq_len}
    rows = tokens.detach().to("cpu", torch.int32).contiguous()
    return save({TOKENS: rows}, metadata={METADATA_KEY: canonical_json(meta).decode()})


def write_dataset(tokens: torch.Tensor, path: Path, name: str = "") -> str:
    """Write `tokens` as a dataset file at `path` (atomically: complete or absent) and return the
    sha256 hex of its bytes, which is what a spec commits to."""
    data = dataset_bytes(tokens, name)
    write_atomic(Path(path), data)
    return hashlib.sha256(data).hexdigest()


def load_dataset(path: Path, expected_sha256: str | None = None, *, vocab_size: int | None = None) -> torch.Tensor:
    """The int32 `[sequences, seq_len]` tokens of the dataset file at `path`, after checking the
    file's sha256 against `expected_sha256` (when given) and, with `vocab_size`, that every id is
    below it (a model cannot embed any other)."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise DatasetError("missing", f"cannot read {path}: {exc.strerror or exc}") from exc
    if expected_sha256 is not None and hashlib.sha256(data).hexdigest() != expected_sha256.lower():
        raise DatasetError(
            "sha256_mismatch", f"{path} hashes to {hashlib.sha256(data).hexdigest()}, not {expected_sha256}"
        )
    return parse_dataset(data, vocab_size=vocab_size)


def parse_dataset(data: bytes, *, vocab_size: int | None = None) -> torch.Tensor:
    """The tokens of a dataset file's bytes (see the module docstring); `DatasetError` otherwise."""
    import torch
    from safetensors import SafetensorError
    from safetensors.torch import load

    header = _header(data)
    meta = _metadata(header)
    entries = {key: value for key, value in header.items() if key != "__metadata__"}
    if set(entries) != {TOKENS}:
        raise DatasetError("wrong_tensors", f"a dataset holds exactly the tensor {TOKENS!r}, not {sorted(entries)}")
    entry = entries[TOKENS]
    if not isinstance(entry, dict) or entry.get("dtype") != "I32":
        raise DatasetError(
            "wrong_dtype",
            f"tokens must be int32 (I32), not {entry.get('dtype') if isinstance(entry, dict) else entry!r}",
        )
    shape = entry.get("shape")
    if shape != [meta["sequences"], meta["seq_len"]]:
        raise DatasetError(
            "wrong_shape", f"tokens are {shape}, the metadata says [{meta['sequences']}, {meta['seq_len']}]"
        )
    try:
        tokens = load(bytes(data))[TOKENS]
    except (SafetensorError, ValueError, RuntimeError, OverflowError) as exc:
        raise DatasetError("not_safetensors", f"cannot read the tokens: {exc}") from exc
    if tokens.dtype != torch.int32:
        raise DatasetError("wrong_dtype", f"tokens must be int32, not {tokens.dtype}")
    if int(tokens.min()) < 0 or (vocab_size is not None and int(tokens.max()) >= vocab_size):
        bound = f"0..{vocab_size - 1}" if vocab_size is not None else ">= 0"
        raise DatasetError(
            "token_out_of_range", f"token ids span {int(tokens.min())}..{int(tokens.max())}, not {bound}"
        )
    return tokens


def dataset_spec(path: Path, eval_sequences: int) -> DilocoData:
    """The `dataset` section of a spec for the file at `path` (its sha256, row count, row length
    and name), the last `eval_sequences` rows held out for evaluation; `uri` is filled when it is
    published (`proofpool.training.published.publish_diloco_spec`)."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise DatasetError("missing", f"cannot read {path}: {exc.strerror or exc}") from exc
    tokens = parse_dataset(data)
    meta = _metadata(_header(data))
    sequences, seq_len = (int(n) for n in tokens.shape)
    if not 0 <= eval_sequences < sequences:
        raise SpecError(
            f"eval_sequences must be in 0..{sequences - 1} for a dataset of {sequences} rows, not {eval_sequences}"
        )
    return DilocoData(
        sha256=hashlib.sha256(data).hexdigest(),
        sequences=sequences,
        seq_len=seq_len,
        eval_sequences=eval_sequences,
        name=meta["name"],
    )


def _header(data: bytes) -> dict[str, Any]:
    """The JSON header of safetensors bytes, read with strict bounds before anything else."""
    if len(data) < 8:
        raise DatasetError("not_safetensors", f"{len(data)} bytes is too short for a safetensors file")
    length = int.from_bytes(data[:8], "little")
    if not 2 <= length <= min(MAX_HEADER_BYTES, len(data) - 8):
        raise DatasetError("not_safetensors", f"header length {length} does not fit the {len(data)}-byte file")
    try:
        header = json.loads(bytes(data[8 : 8 + length]).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise DatasetError("not_safetensors", f"the header is not JSON: {exc}") from exc
    if not isinstance(header, dict):
        raise DatasetError("not_safetensors", "the header is not a JSON object")
    return header


def _metadata(header: dict[str, Any]) -> dict[str, Any]:
    """The dataset's own metadata: exactly kind, name, sequences and seq_len, well typed."""
    raw = header.get("__metadata__")
    if not isinstance(raw, dict) or not isinstance(raw.get(METADATA_KEY), str):
        raise DatasetError("bad_metadata", f"no {METADATA_KEY!r} metadata: not a proofpool dataset")
    try:
        meta = json.loads(raw[METADATA_KEY])
    except (ValueError, RecursionError) as exc:
        raise DatasetError("bad_metadata", f"the {METADATA_KEY!r} metadata is not JSON: {exc}") from exc
    if not isinstance(meta, dict) or set(meta) != {"kind", "name", "sequences", "seq_len"}:
        raise DatasetError("bad_metadata", "the metadata must hold exactly kind, name, sequences and seq_len")
    if meta["kind"] != DATASET_KIND or not isinstance(meta["name"], str):
        raise DatasetError("bad_metadata", f"kind {meta['kind']!r} is not {DATASET_KIND!r}, or the name is not text")
    for key in ("sequences", "seq_len"):
        if type(meta[key]) is not int or meta[key] < 1:
            raise DatasetError("bad_metadata", f"{key} must be a positive integer, not {meta[key]!r}")
    return meta


def write_atomic(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a temporary sibling: the file is complete or absent."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, scratch = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.replace(scratch, path)
    except BaseException:
        Path(scratch).unlink(missing_ok=True)
        raise

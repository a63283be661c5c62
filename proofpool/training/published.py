"""Training pools' specs, base models and datasets in the object store: `diloco://<sha256>` pools.

A training pool is created with the model URI `diloco://<sha256>` and the `specSha256` <sha256>:
it commits on-chain, twice, to the sha256 of a DiLoCo spec (`proofpool.core.diloco.spec`). The
layout is that of `spec://` pools (`proofpool.envs.published`), every object named by its content:

- `specs/<sha256>.json`: the spec's canonical JSON (RL and DiLoCo specs share the namespace: a
  name is a hash, and the spec's `kind` says which it is);
- `models/<manifest sha256>/…`: the base model (checkpoint version 0) as a sharded checkpoint whose
  manifest hash the spec records (`model.manifest_sha256`), weights in their own dtype (fp32);
- `pools/datasets/<sha256>.safetensors`: the tokenized dataset (`proofpool.training.dataset`),
  whose sha256 the spec records (`dataset.sha256`).

`publish_diloco_spec` puts them there (the pool creator, before `createPool`); every role then
reads the spec with `pool_diloco_spec` (the two on-chain commitments must agree, the spec must hash
to them) and the dataset with `fetch_dataset` (verified against the spec, cached by its hash).
Nothing is trusted from the store that the on-chain hash does not vouch for.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Final

from proofpool.core.diloco.spec import DilocoSpec, parse_diloco_spec
from proofpool.core.spec import SpecError
from proofpool.core.spec import sha256_hex as digest_hex
from proofpool.envs import TRAINING_SCHEME
from proofpool.envs.published import MAX_SPEC_BYTES, spec_key
from proofpool.envs.spec import SpecMismatch
from proofpool.inference.model import model_config
from proofpool.infra.checkpoint.manifest import hash_file
from proofpool.infra.checkpoint.shards import write_checkpoint
from proofpool.infra.checkpoint.store import upload_checkpoint
from proofpool.infra.storage import ObjectStore
from proofpool.training.dataset import MAX_HEADER_BYTES, DatasetError, dataset_spec, parse_dataset, write_atomic

DILOCO_SCHEME: Final = TRAINING_SCHEME
"""The scheme of a training pool's model URI: `diloco://<sha256 of its spec>`."""
DATASETS_PREFIX: Final = "pools/datasets/"
_URI = re.compile(r"^diloco://([0-9a-f]{64})$")
_OBJECT_URI = re.compile(r"^s3://([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])/([A-Za-z0-9!_.*'()/-]+)$")


def diloco_uri(sha256_hex: str) -> str:
    """The model URI of a training pool that runs the spec with this hash."""
    return f"{DILOCO_SCHEME}://{sha256_hex}"


def is_training_pool(model_uri: str) -> bool:
    """True for a pool created with a `diloco://` model URI (well formed or not: a malformed one is
    still a training pool's, and `diloco_spec_hash_of` refuses it)."""
    return model_uri.strip().lower().startswith(f"{DILOCO_SCHEME}://")


def diloco_spec_hash_of(model_uri: str) -> str:
    """The spec hash a `diloco://` model URI names; `SpecError` for anything else."""
    found = _URI.match(model_uri.strip().lower())
    if not found:
        raise SpecError(f"{model_uri!r} is not a training pool URI (diloco://<64 hex digits>)")
    return found.group(1)


def dataset_key(sha256: str) -> str:
    """`pools/datasets/<sha256>.safetensors`: where the dataset with this file hash is stored."""
    return f"{DATASETS_PREFIX}{sha256}.safetensors"


def publish_diloco_spec(store: ObjectStore, spec: DilocoSpec, model_dir: Path, dataset_path: Path) -> DilocoSpec:
    """Upload the base model (a content-addressed checkpoint of `model_dir`, weights as they are),
    the dataset file, then the spec naming both; return the spec as stored (with `model.uri`,
    `model.manifest_sha256` and `dataset.uri` filled in), whose sha256 the pool commits to.

    The spec must describe what it is published with: the model's architecture and vocabulary,
    the dataset file's hash, rows and row length (`SpecError` otherwise)."""
    _check_model(spec, Path(model_dir))
    described = dataset_spec(Path(dataset_path), spec.dataset.eval_sequences)
    if (described.sha256, described.sequences, described.seq_len) != (
        spec.dataset.sha256,
        spec.dataset.sequences,
        spec.dataset.seq_len,
    ):
        raise SpecError(
            f"{dataset_path} is dataset {described.sha256} of {described.sequences} x {described.seq_len} tokens; "
            f"the spec names {spec.dataset.sha256} of {spec.dataset.sequences} x {spec.dataset.seq_len}"
        )
    with tempfile.TemporaryDirectory(prefix="proofpool-diloco-model-") as scratch:
        out = Path(scratch) / "model"
        manifest = write_checkpoint(Path(model_dir), out, pool_id=0, version=0)
        digest = manifest.sha256().hex()
        model_uri = upload_checkpoint(store, out, manifest, prefix=f"models/{digest}/")
    dataset_uri = _upload_dataset(store, Path(dataset_path), spec.dataset.sha256)
    stored = parse_diloco_spec(
        replace(
            spec,
            model=replace(spec.model, uri=model_uri, manifest_sha256=digest),
            dataset=replace(spec.dataset, uri=dataset_uri),
        ).to_json()
    )
    store.put_object(spec_key(stored.sha256()), stored.canonical(), content_type="application/json")
    return stored


def fetch_diloco_spec(store: ObjectStore, sha256_hex: str) -> DilocoSpec:
    """The training pool spec stored under `sha256_hex`, checked against the hash (its bytes and
    its canonical form)."""
    data = store.get_object(spec_key(sha256_hex), max_bytes=MAX_SPEC_BYTES)
    if digest_hex(data) != sha256_hex:
        raise SpecError(f"the object stored as spec {sha256_hex} hashes to {digest_hex(data)}: refused")
    spec = parse_diloco_spec(data)
    if spec.sha256() != sha256_hex:
        raise SpecError(f"spec {sha256_hex} is not in canonical form: refused")
    return spec


def pool_diloco_spec(store: ObjectStore, model_uri: str, spec_sha256: bytes) -> DilocoSpec:
    """The spec of a training pool created on-chain with `model_uri` and `spec_sha256`, once the two
    commitments agree (`SpecMismatch` otherwise: nobody works for or judges such a pool)."""
    named = diloco_spec_hash_of(model_uri)
    if bytes.fromhex(named) != spec_sha256:
        raise SpecMismatch(
            f"the pool's model URI {model_uri!r} names spec {named} but the pool committed on-chain to "
            f"specSha256 0x{spec_sha256.hex()}: refused, nobody works for or judges this pool"
        )
    return fetch_diloco_spec(store, named)


def fetch_dataset(store: ObjectStore, spec: DilocoSpec, cache_dir: Path) -> Path:
    """The local file of the spec's dataset: `cache_dir/datasets/<sha256>.safetensors`, downloaded
    once from `spec.dataset.uri`, checked against the spec's hash, rows, row length and vocabulary
    before it is kept. A cached file is re-hashed on every call and fetched again if damaged."""
    data = spec.dataset
    local = Path(cache_dir).expanduser() / "datasets" / f"{data.sha256}.safetensors"
    if local.is_file() and hash_file(local)[0] == data.sha256:
        return local
    if data.uri is None:
        raise DatasetError("missing", f"spec names no stored dataset (dataset.uri) for {data.sha256}")
    found = _OBJECT_URI.match(data.uri)
    if found is None or found.group(1) != store.bucket:
        raise DatasetError("uri_invalid", f"{data.uri!r} is not s3://{store.bucket}/<key>")
    limit = data.sequences * data.seq_len * 4 + MAX_HEADER_BYTES + 8
    raw = store.get_object(found.group(2), max_bytes=limit)
    if digest_hex(raw) != data.sha256:
        raise DatasetError("sha256_mismatch", f"{data.uri} hashes to {digest_hex(raw)}, not {data.sha256}")
    tokens = parse_dataset(raw, vocab_size=spec.model.vocab_size)
    if tuple(tokens.shape) != (data.sequences, data.seq_len):
        raise DatasetError(
            "wrong_shape",
            f"dataset {data.sha256} is {list(tokens.shape)}, the spec says [{data.sequences}, {data.seq_len}]",
        )
    write_atomic(local, raw)
    return local


def _check_model(spec: DilocoSpec, model_dir: Path) -> None:
    """`SpecError` unless `model_dir` holds the architecture and vocabulary the spec names."""
    config = model_config(model_dir)
    architectures = config.get("architectures") or []
    if architectures != [spec.model.architecture]:
        raise SpecError(f"{model_dir} holds {architectures}, the spec names {spec.model.architecture!r}")
    if config.get("vocab_size") != spec.model.vocab_size:
        raise SpecError(f"{model_dir} has vocab_size {config.get('vocab_size')}, the spec says {spec.model.vocab_size}")


def _upload_dataset(store: ObjectStore, path: Path, sha256: str) -> str:
    """Put the dataset file under its content key (skipped when the store has it) and return its URI."""
    key = dataset_key(sha256)
    raw = path.read_bytes()
    if digest_hex(raw) != sha256:
        raise SpecError(f"{path} changed while it was published (it no longer hashes to {sha256})")
    stored = store.head_object(key)
    if stored is None or stored.size != len(raw) or stored.sha256_hex != sha256:
        store.put_object(key, raw, sha256_hex=sha256)
    return f"s3://{store.bucket}/{key}"

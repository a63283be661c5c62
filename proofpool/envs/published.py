"""Pool specs in the object store, named by their hash: `spec://<sha256>` pools.

A pool created with the model URI `spec://<sha256>` and the `specSha256` <sha256> commits on-chain
(its `PoolCreated` event, where `specSha256` is an indexed topic, and its state) to the sha256 of a
pool spec (`proofpool.core.spec`); every role refuses a pool whose two commitments disagree
(`proofpool.envs.check_spec_commitment`). The spec itself, the pool's index list and the base model
are content-addressed objects in the market's object store:

- `specs/<sha256>.json`: the spec's canonical JSON (its sha256 is its name);
- `specs/<sha256>.indices.json`: the index list, when the spec names one (`indices.sha256`);
- `models/<manifest sha256>/…`: the base model as a sharded checkpoint, whose manifest hash the
  spec records (`model.manifest_sha256`), so every file is verified on download.

`publish_spec` puts them there (the pool creator, before `createPool`); `spec_pool_environment`
is what every role runs for such a pool: fetch the spec and check its hash, fetch and verify the
base model, then `spec_environment` (package versions, data digest, golden vectors). Nothing is
trusted from the store that the on-chain hash does not vouch for.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Final

from proofpool.core.environment import Progress
from proofpool.core.spec import NO_SPEC, PoolSpec, SpecError, canonical_json, ids_sha256, parse_spec, sha256_hex
from proofpool.envs import SPEC_SCHEME
from proofpool.envs.spec import spec_environment
from proofpool.envs.tokenized import ModelEnvironment
from proofpool.infra.checkpoint.fetch import ensure_checkpoint
from proofpool.infra.checkpoint.shards import write_checkpoint
from proofpool.infra.checkpoint.store import upload_checkpoint
from proofpool.infra.storage import ObjectStore

MAX_SPEC_BYTES: Final = 4 * 2**20
"""A spec is a few KiB; golden completions and long templates stay far below this."""
MAX_INDEX_BYTES: Final = 256 * 2**20
_URI = re.compile(r"^spec://([0-9a-f]{64})$")


@dataclass(frozen=True)
class SpecPoolEnvironment(ModelEnvironment):
    """The environment of a `spec://` pool: a `ModelEnvironment` that knows the spec it was built from."""

    spec_sha256: bytes = NO_SPEC
    """sha256 of the spec, which is the pool's on-chain `specSha256` and what its rollout files carry."""


def spec_uri(sha256: str) -> str:
    """The model URI of a pool that runs the spec with this hash."""
    return f"{SPEC_SCHEME}://{sha256}"


def spec_hash_of(model_uri: str) -> str:
    """The spec hash a `spec://` model URI names; `SpecError` for anything else."""
    found = _URI.match(model_uri.strip().lower())
    if not found:
        raise SpecError(f"{model_uri!r} is not a spec URI (spec://<64 hex digits>)")
    return found.group(1)


def spec_key(sha256: str) -> str:
    return f"specs/{sha256}.json"


def indices_key(sha256: str) -> str:
    return f"specs/{sha256}.indices.json"


def publish_spec(store: ObjectStore, spec: PoolSpec, model_dir: Path, indices: Sequence[int] | None = None) -> PoolSpec:
    """Upload the base model (as a content-addressed checkpoint), then the spec naming it, then its
    index list; returns the spec as stored (with `model.uri` and `model.manifest_sha256` filled in)."""
    if (indices is None) != (spec.indices.sha256 is None):
        raise SpecError("pass the index list exactly when the spec names one (indices.sha256)")
    if indices is not None and ids_sha256(indices) != spec.indices.sha256:
        raise SpecError("the index list does not hash to the spec's indices.sha256")
    with tempfile.TemporaryDirectory(prefix="proofpool-spec-model-") as scratch:
        out = Path(scratch) / "model"
        manifest = write_checkpoint(model_dir, out, pool_id=0, version=0)
        digest = manifest.sha256().hex()
        uri = upload_checkpoint(store, out, manifest, prefix=f"models/{digest}/")
    stored = parse_spec(replace(spec, model=replace(spec.model, uri=uri, manifest_sha256=digest)).to_json())
    data = canonical_json(stored.to_json())
    store.put_object(spec_key(stored.sha256()), data, content_type="application/json")
    if indices is not None:
        listed = canonical_json([int(i) for i in indices])
        store.put_object(indices_key(stored.sha256()), listed, content_type="application/json")
    return stored


def fetch_spec(store: ObjectStore, sha256: str) -> tuple[PoolSpec, list[int] | None]:
    """The spec stored under `sha256` and its index list, both checked against the hash."""
    data = store.get_object(spec_key(sha256), max_bytes=MAX_SPEC_BYTES)
    if sha256_hex(data) != sha256:
        raise SpecError(f"the object stored as spec {sha256} hashes to {sha256_hex(data)}: refused")
    spec = parse_spec(data)
    if spec.sha256() != sha256:
        raise SpecError(f"spec {sha256} is not in canonical form: refused")
    if spec.indices.sha256 is None:
        return spec, None
    raw = store.get_object(indices_key(sha256), max_bytes=MAX_INDEX_BYTES)
    indices = json.loads(raw)
    if not isinstance(indices, list) or ids_sha256(indices) != spec.indices.sha256:
        raise SpecError(f"the index list of spec {sha256} does not hash to its indices.sha256: refused")
    return spec, indices


def spec_pool_environment(
    store: ObjectStore,
    sha256: str,
    cache_dir: Path,
    progress: Progress | None = None,
    max_bytes: int | None = None,
) -> SpecPoolEnvironment:
    """The `Environment` of a `spec://<sha256>` pool on this machine: the spec and base model
    fetched and verified, then every check of `spec_environment`; it carries the spec's hash."""
    say = progress or (lambda _message: None)
    spec, indices = fetch_spec(store, sha256)
    if spec.model.uri is None or spec.model.manifest_sha256 is None:
        raise SpecError(f"spec {sha256} names no stored base model (model.uri)")
    say(f"fetching the base model of spec {sha256[:12]} from {spec.model.uri}")
    model_dir = ensure_checkpoint(
        store,
        spec.model.uri,
        bytes.fromhex(spec.model.manifest_sha256),
        Path(cache_dir).expanduser(),
        max_bytes=max_bytes,
    )
    built = spec_environment(spec, model_dir, indices)
    values = {field.name: getattr(built, field.name) for field in fields(built)}
    return SpecPoolEnvironment(**{**values, "spec_sha256": bytes.fromhex(sha256)})

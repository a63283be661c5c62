"""A pool's environment, found from the `modelUri` it was created with.

Environments are plugins: a package declares one in the entry point group
`proofpool.environments`, named by the URI scheme its pools use (the arithmetic devnet
environment, `environments/arithmetic/`, answers `devnet://...`). A `spec://<sha256>` pool runs a
task environment on a Hugging Face model as its pool spec says; the spec, its index list and the
base model come from the object store, checked against that hash (`proofpool.envs.published`).
No product module imports an environment package; every role resolves the pool's URI here, so a
pool that brings its own model and task set needs a package installed, not a change to proofpool.

A pool commits to its spec twice on-chain: in its model URI and in its `specSha256`. Every role
(worker, validator, backend) reaches a pool's environment through `pool_environment`, which
refuses the pool unless the two agree (`check_spec_commitment`): nobody works for it or judges
its files, so nobody is slashed over it.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from functools import lru_cache
from importlib.metadata import entry_points
from pathlib import Path
from typing import Final

from proofpool.core.assignment import DEFAULT_ASSIGNMENT, AssignmentConfig
from proofpool.core.environment import Environment, Progress
from proofpool.core.errors import ProofpoolError
from proofpool.core.spec import NO_SPEC

ENTRY_POINT_GROUP: Final = "proofpool.environments"
SPEC_SCHEME: Final = "spec"
"""The scheme of a pool that runs a pool spec: `spec://<sha256 of the spec>` (`proofpool.envs.published`)."""
TRAINING_SCHEME: Final = "diloco"
"""The scheme of a training pool: `diloco://<sha256 of its DiLoCo spec>` (`proofpool.training.published`).
Named here, beside `SPEC_SCHEME`, so that resolving any other pool's commitment imports neither
publication module (nor the object store client they need, which a base install lacks)."""


_LOADING: Final = threading.RLock()
"""Held while an environment loads (`environment_for`)."""


class UnknownEnvironment(ProofpoolError):
    """No installed environment serves a pool's model URI."""


class UnknownBaseModel(ProofpoolError):
    """The pool's base model can be neither built by its environment nor found in a given directory."""


def scheme(model_uri: str) -> str:
    """The URI's scheme (`devnet` of `devnet://tiny-llama/arithmetic-add-100`), which names its environment."""
    name, separator, rest = model_uri.partition("://")
    if not separator or not name or not rest:
        raise UnknownEnvironment(f"pool model {model_uri!r} is not a URI (expected scheme://...)")
    return name.lower()


def installed() -> dict[str, str]:
    """Scheme -> the object path of each installed environment."""
    return {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}


def environment_for(model_uri: str) -> Environment:
    """The environment of a pool created with `model_uri` (loaded once per URI and process).

    Loads are serialized: the backend builds environments in worker threads, and two first loads of
    one spec pool at once would download into the same cache directory and import transformers from
    two threads (which can fail with "cannot import name"). A load that fails is not cached."""
    with _LOADING:
        return _load_environment(model_uri)


def forget_environments() -> None:
    """Forget every loaded environment, so the next `environment_for` loads afresh (for a process
    whose store or settings changed what a URI resolves to)."""
    with _LOADING:
        _load_environment.cache_clear()


@lru_cache(maxsize=32)
def _load_environment(model_uri: str) -> Environment:
    wanted = scheme(model_uri)
    if wanted == SPEC_SCHEME:
        return _spec_pool(model_uri)
    found = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == wanted]
    if not found:
        have = ", ".join(sorted(installed())) or "none"
        raise UnknownEnvironment(
            f"no environment is installed for {model_uri!r} (scheme {wanted!r}; installed: {have}); "
            f"install the package that provides it"
        )
    environment = found[0].load()
    if not isinstance(environment, Environment):
        raise UnknownEnvironment(f"{found[0].value} is not a proofpool environment (see proofpool.core.environment)")
    return environment


def spec_commitment(model_uri: str) -> bytes:
    """The `specSha256` a pool created with `model_uri` must commit to on-chain: the hash a
    `spec://` URI (an RL pool's spec) or a `diloco://` URI (a training pool's spec,
    `proofpool.training.published`) names (`SpecError` for a malformed one), `NO_SPEC` for any
    other scheme."""
    named = model_uri.strip().lower()
    if named.startswith(f"{SPEC_SCHEME}://"):
        from proofpool.envs.published import spec_hash_of

        return bytes.fromhex(spec_hash_of(model_uri))
    if named.startswith(f"{TRAINING_SCHEME}://"):
        from proofpool.training.published import diloco_spec_hash_of

        return bytes.fromhex(diloco_spec_hash_of(model_uri))
    return NO_SPEC


def check_spec_commitment(model_uri: str, spec_sha256: bytes) -> None:
    """Refuse a pool whose on-chain `specSha256` and model URI disagree (`SpecMismatch`).

    A `spec://X` or `diloco://X` pool must have committed to `specSha256` X, and a pool with a
    nonzero `specSha256` must be such a pool naming it (`spec_commitment`). Either way round, the
    two commitments cannot both be what the creator meant, so no role works for the pool or judges
    its files."""
    from proofpool.envs.spec import SpecMismatch

    expected = spec_commitment(model_uri)
    if spec_sha256 == expected:
        return
    on_chain = "no spec (specSha256 is zero)" if spec_sha256 == NO_SPEC else f"specSha256 0x{spec_sha256.hex()}"
    named = f"names spec {expected.hex()}" if expected != NO_SPEC else "names no spec"
    raise SpecMismatch(
        f"the pool's model URI {model_uri!r} {named} but the pool committed on-chain to {on_chain}: "
        "refused, nobody works for or judges this pool"
    )


def pool_environment(model_uri: str, spec_sha256: bytes) -> Environment:
    """The environment of a pool created on-chain with `model_uri` and `spec_sha256`, once the two
    agree (`check_spec_commitment`): what every role runs for a pool."""
    check_spec_commitment(model_uri, spec_sha256)
    return environment_for(model_uri)


def environment_spec_sha256(environment: Environment) -> bytes:
    """The spec hash the rollout files of a pool running `environment` carry: the hash of the spec a
    `spec://` pool's environment was built from (`proofpool.envs.published.SpecPoolEnvironment`),
    `NO_SPEC` for any other environment."""
    sha256 = getattr(environment, "spec_sha256", None)
    return sha256 if isinstance(sha256, bytes) and len(sha256) == len(NO_SPEC) else NO_SPEC


def _spec_pool(model_uri: str) -> Environment:
    """A `spec://<sha256>` pool's environment, built from the spec and base model in the market's
    object store (`proofpool.envs.published`), with this process's settings."""
    from proofpool.envs.published import spec_hash_of, spec_pool_environment
    from proofpool.infra.config import get_settings
    from proofpool.infra.storage import ObjectStore

    settings = get_settings()
    return spec_pool_environment(
        ObjectStore.from_settings(settings),
        spec_hash_of(model_uri),
        settings.checkpoint_cache_dir,
        max_bytes=settings.checkpoint_max_bytes,
    )


def pool_assignment(
    environment: Environment,
    batch_size: int | None = None,
    group_size: int | None = None,
    max_tokens: int | None = None,
    temperature: float | None = None,
) -> AssignmentConfig:
    """The assignment settings of a pool running `environment`, one rule for the backend that hands
    them out and the validators that judge files against them.

    A spec pool's are its spec's: the pool committed to them on-chain, and an operator's override
    (`pool_assignment_config`) would only make every honest file fail its validators, so it is
    ignored. Any other pool's are the defaults, with the environment's completion budget, and the
    operator's overrides (the arguments; None keeps the default)."""
    pinned = getattr(environment, "assignment", None)
    if isinstance(pinned, AssignmentConfig):
        return pinned
    default = replace(DEFAULT_ASSIGNMENT, max_tokens=environment.tokens.max_completion_tokens)
    return default.with_overrides(batch_size, group_size, max_tokens, temperature)


def resolve_base_model(
    model_uri: str,
    override: Path | None = None,
    progress: Progress | None = None,
    *,
    spec_sha256: bytes | None = None,
) -> Path:
    """The local directory of the base model (checkpoint version 0) of a pool created with `model_uri`.

    With the pool's on-chain `spec_sha256`, a pool whose two spec commitments disagree is refused
    first (`check_spec_commitment`). `override` (a role's `--base-model`) wins: a directory that
    holds a Hugging Face model. Else the pool's environment builds or finds it.
    """
    if spec_sha256 is not None:
        check_spec_commitment(model_uri, spec_sha256)
    if override is not None:
        if not (Path(override) / "config.json").is_file():
            raise UnknownBaseModel(f"{override} holds no model (config.json missing)")
        return Path(override)
    try:
        return environment_for(model_uri).base_model(model_uri, progress)
    except UnknownEnvironment as exc:
        raise UnknownBaseModel(f"{exc}, or pass the model's local directory with --base-model") from exc

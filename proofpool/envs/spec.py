"""Build a pool spec from an environment and a model, and hold a role to one (`proofpool.core.spec`).

`build_spec` is what a pool creator runs: it loads the task environment with its config, renders
and scores a few problems with the model's tokenizer and chat template (the golden vectors), and
writes down everything else the roles must share. `spec_environment` is what every role runs
before working on a pool: it rebuilds the environment from the spec, refuses any difference (the
environment's version, package versions, data digest, the model's architecture and vocabulary,
the index list) with `SpecMismatch`, renders and scores the golden vectors, and only then hands
out the pool's `Environment`. A role that disagrees stops there: it never produces or judges a
rollout of that pool, so nobody is slashed over its different tokenizer or scorer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from proofpool.core.assignment import AssignmentConfig
from proofpool.core.errors import ProofpoolError
from proofpool.core.spec import (
    EnvironmentSpec,
    GenerationSpec,
    GoldenVector,
    IndexSpec,
    ModelSpec,
    PoolSpec,
    PromptSpec,
    SpecError,
    ids_sha256,
    parse_spec,
)
from proofpool.envs.tasks import load_task_environment
from proofpool.envs.tokenized import (
    ModelEnvironment,
    PromptSettings,
    default_held_out,
    default_stop_ids,
    model_environment,
)
from proofpool.inference.model import check_architecture, model_config


class SpecMismatch(SpecError):
    """What this machine builds from a spec differs from what the spec records."""


def build_spec(
    env_id: str,
    config: Mapping[str, Any],
    model_dir: Path,
    *,
    batch_size: int,
    group_size: int,
    max_prompt_tokens: int,
    max_tokens: int,
    temperature: float,
    stop_ids: Sequence[int] | None = None,
    prompt: PromptSpec | None = None,
    indices: Sequence[int] | None = None,
    band: tuple[float, float] | None = None,
    held_out: int | None = None,
    golden: int = 3,
    model_uri: str | None = None,
    manifest_sha256: str | None = None,
) -> PoolSpec:
    """The spec of a pool running `env_id` with `config` on the model in `model_dir`, with
    `golden` golden vectors (the first problems of the index list) and `held_out` problems kept out
    of every draw for the trainer's evaluation (None: `default_held_out` of the pool's distinct
    problems); validated by a round trip."""
    environment = load_task_environment(env_id, config)
    described = environment.describe()
    prompt = prompt or PromptSpec()
    from transformers import AutoTokenizer

    stops = tuple(sorted(stop_ids or default_stop_ids(model_dir, AutoTokenizer.from_pretrained(str(model_dir)))))
    if held_out is None:
        held_out = default_held_out(len(set(indices)) if indices is not None else len(environment))
    try:
        pool = model_environment(
            environment,
            model_dir,
            max_prompt_tokens=max_prompt_tokens,
            max_completion_tokens=max_tokens,
            stop_ids=frozenset(stops),
            prompt=PromptSettings(prompt.template_kwargs, prompt.chat_template),
            indices=indices,
            held_out=held_out,
        )
    except ValueError as exc:  # e.g. a held-out slice that leaves too little to train on
        raise SpecError(str(exc)) from exc
    vectors = [_golden_vector(pool, index) for index in pool.taskset.indices[:golden]]
    spec = PoolSpec(
        environment=EnvironmentSpec(
            id=environment.id,
            version=environment.version,
            config=dict(described.get("config", config)),
            packages=dict(described.get("packages", {})),
            data_sha256=str(described["data_sha256"]),
        ),
        indices=IndexSpec(
            count=len(pool.taskset.indices),
            sha256=None if indices is None else ids_sha256(indices),
            band=band,
            held_out=held_out,
        ),
        model=ModelSpec(
            architecture=check_architecture(model_dir),
            vocab_size=int(model_config(model_dir)["vocab_size"]),
            uri=model_uri,
            manifest_sha256=manifest_sha256,
        ),
        prompt=prompt,
        generation=GenerationSpec(batch_size, group_size, max_prompt_tokens, max_tokens, float(temperature), stops),
        golden=tuple(vectors),
    )
    return parse_spec(spec.to_json())


def _golden_vector(pool: ModelEnvironment, index: int) -> GoldenVector:
    """Problem `index` as this machine renders and scores it (its reference completion, or an
    empty one when the source has none)."""
    prompt = pool.taskset.prompt_tokens(str(index))
    if len(prompt) > pool.tokens.max_prompt_tokens:
        raise SpecError(
            f"problem {index} renders to {len(prompt)} prompt tokens, above max_prompt_tokens "
            f"{pool.tokens.max_prompt_tokens}"
        )
    completion = pool.taskset.environment.reference_completion(index) or ""
    score = pool.taskset.environment.score(index, completion)
    return GoldenVector(index, ids_sha256(prompt), len(prompt), completion, score.reward, score.status)


def spec_environment(spec: PoolSpec, model_dir: Path, indices: Sequence[int] | None = None) -> ModelEnvironment:
    """The pool's `Environment` on this machine, after every check that it is the spec's
    (`SpecMismatch` naming each difference otherwise). `indices` is the pool's index list when the
    spec names one (`spec.indices.sha256`)."""
    problems: list[str] = []
    environment = load_task_environment(spec.environment.id, spec.environment.config)
    described = environment.describe()
    if environment.version != spec.environment.version:
        problems.append(f"environment version {environment.version} (spec: {spec.environment.version})")
    for name, version in sorted(spec.environment.packages.items()):
        mine = dict(described.get("packages", {})).get(name)
        if mine != version:
            problems.append(f"package {name} {mine or 'missing'} (spec: {version})")
    if described.get("data_sha256") != spec.environment.data_sha256:
        problems.append(f"problem data sha256 {described.get('data_sha256')} (spec: {spec.environment.data_sha256})")
    architecture = check_architecture(model_dir)
    vocab = int(model_config(model_dir)["vocab_size"])
    if (architecture, vocab) != (spec.model.architecture, spec.model.vocab_size):
        problems.append(
            f"model {architecture} with vocabulary {vocab} (spec: {spec.model.architecture}, {spec.model.vocab_size})"
        )
    if spec.indices.sha256 is None:
        if indices is not None or len(environment) != spec.indices.count:
            problems.append(f"{len(environment)} problems (spec: all {spec.indices.count})")
    elif indices is None:
        raise SpecMismatch("the spec names an index list (indices.sha256); pass the pool's list")
    elif ids_sha256(indices) != spec.indices.sha256 or len(indices) != spec.indices.count:
        problems.append(f"index list sha256 {ids_sha256(indices)} (spec: {spec.indices.sha256})")
    if problems:
        raise SpecMismatch("this machine differs from the pool spec: " + "; ".join(problems))
    g = spec.generation
    try:
        pool = model_environment(
            environment,
            model_dir,
            max_prompt_tokens=g.max_prompt_tokens,
            max_completion_tokens=g.max_tokens,
            stop_ids=frozenset(g.stop_ids),
            prompt=PromptSettings(spec.prompt.template_kwargs, spec.prompt.chat_template),
            indices=indices,
            held_out=spec.indices.held_out,
        )
    except ValueError as exc:  # e.g. a held-out slice that leaves too little to train on
        raise SpecError(f"the spec cannot be served: {exc}") from exc
    check_golden(spec, pool)
    return replace(pool, assignment=AssignmentConfig(g.batch_size, g.group_size, g.max_tokens, g.temperature))


def check_golden(spec: PoolSpec, pool: ModelEnvironment) -> None:
    """Render and score every golden vector; `SpecMismatch` naming each one this machine gets wrong."""
    wrong: list[str] = []
    for vector in spec.golden:
        try:
            prompt = pool.taskset.prompt_tokens(str(vector.index))
        except ProofpoolError as exc:  # an index outside the list, a template that fails here
            wrong.append(f"problem {vector.index}: {exc}")
            continue
        if ids_sha256(prompt) != vector.prompt_sha256:
            wrong.append(
                f"problem {vector.index} renders to other prompt ids ({len(prompt)} tokens, spec: "
                f"{vector.prompt_tokens}): another tokenizer, chat template or problem text"
            )
        score = pool.taskset.environment.score(vector.index, vector.completion)
        if score.reward != vector.reward:
            wrong.append(f"problem {vector.index} scores {score.reward} (spec: {vector.reward}): another scorer")
    if wrong:
        raise SpecMismatch("golden vectors disagree: " + "; ".join(wrong))

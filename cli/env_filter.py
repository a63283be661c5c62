"""`proofpool env filter`: keep the problems the base model solves sometimes, but not always.

A GRPO group whose samples all earn the same reward has zero advantages and teaches nothing, so a
pool should draw from problems of middling difficulty for its base model. This command measures
it: it samples the base model several times per problem with the worker's own engine (vLLM with
the seeded sampler), scores every completion with the environment's scorer, and keeps the
problems whose pass rate lies in a band (INTELLECT-2 kept 0.1..0.8). The kept list is what
`proofpool env spec --indices` pins into a pool spec. The arithmetic lives in
`proofpool.envs.difficulty`; this module only generates, prints and writes.

Cost: problems x samples generations of up to --max-tokens tokens each.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from proofpool.envs.difficulty import PassRate
    from proofpool.envs.tokenized import ModelEnvironment

MAX_NUM_SEQS = 256
"""vLLM's cap on sequences decoded together; a chunk of `batch x samples` rows above it is queued."""


def indices_path(out: Path) -> Path:
    """Where the plain index list goes beside the report: `<out stem>.indices.json`."""
    return out.with_name(f"{out.stem}.indices.json")


def filter_command(
    env: Annotated[str, typer.Argument(help="Environment id, as `proofpool env list` prints it.")],
    model: Annotated[
        Path, typer.Option("--model", "-m", help="The base model's Hugging Face directory (the pool's base model).")
    ],
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            "-o",
            help="Where to write the JSON report (kept indices, band, config, summary); the plain index "
            "list for `proofpool env spec --indices` goes beside it as <stem>.indices.json.",
        ),
    ],
    config: Annotated[
        str | None,
        typer.Option(
            "--config",
            "-c",
            help='The environment config as JSON, or @FILE holding it (e.g. \'{"families": ["percent"]}\'); '
            "use the same config for `env spec`. Default: {}.",
        ),
    ] = None,
    samples: Annotated[
        int, typer.Option(min=1, help="Completions sampled per problem; the pass rate is passed / conclusive samples.")
    ] = 8,
    max_tokens: Annotated[
        int, typer.Option(min=1, help="Completion budget per sample; use the pool's, or rates come out too low.")
    ] = 512,
    max_prompt_tokens: Annotated[
        int,
        typer.Option(min=1, help="Longest prompt a problem may render to; longer problems are skipped (unmeasured)."),
    ] = 2048,
    temperature: Annotated[
        float, typer.Option(min=0.0, help="Sampling temperature; use the pool's, since it moves pass rates.")
    ] = 1.0,
    low: Annotated[float, typer.Option(help="Lowest pass rate kept (inclusive), between 0 and --high.")] = 0.1,
    high: Annotated[float, typer.Option(help="Highest pass rate kept (inclusive), between --low and 1.")] = 0.8,
    limit: Annotated[
        int | None, typer.Option(min=1, help="Measure only the first N problems (0..N-1). Default: all.")
    ] = None,
    seed: Annotated[
        int,
        typer.Option(min=0, max=2**64 - 1, help="Sampling seed: the same seed, model and options keep the same list."),
    ] = 0,
    batch: Annotated[
        int, typer.Option(min=1, help="Problems generated per engine call (batch x samples sequences at once).")
    ] = 64,
) -> None:
    """Measure the base model's pass rate on each problem of ENV and keep those in [--low, --high].

    Samples every problem --samples times with the worker's engine, scores each completion as
    validators do (a pass is `correct` with reward 1.0; `inconclusive` samples are not counted),
    writes the report to --out and the kept list to <stem>.indices.json, and prints the count and
    the list's sha256 (what `env spec --indices` pins). Costs problems x samples generations."""
    from proofpool.core.spec import ids_sha256
    from proofpool.envs.difficulty import band_summary, check_band, select_band
    from proofpool.envs.tasks import load_task_environment, read_config
    from proofpool.envs.tokenized import model_environment

    try:
        check_band(low, high)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--low/--high") from None
    environment = load_task_environment(env, read_config(config))
    try:
        described = environment.describe()
        pool = model_environment(
            environment, model, max_prompt_tokens=max_prompt_tokens, max_completion_tokens=max_tokens
        )
        chosen = list(range(len(environment) if limit is None else min(limit, len(environment))))
        rates, too_long = _measure(pool, chosen, samples, max_tokens, temperature, seed, batch, low, high)
    finally:
        close = getattr(environment, "close", None)  # e.g. math's scoring child
        if callable(close):
            close()

    kept = select_band(rates, low, high)
    report = {
        "indices": kept,
        "band": [low, high],
        "env": env,
        "config": dict(described.get("config", read_config(config))),
        "samples": samples,
        "model": str(model),
        "summary": band_summary(rates, kept),
        "generation": {"max_tokens": max_tokens, "temperature": temperature, "seed": seed},
        "too_long": too_long,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    plain = indices_path(out)
    plain.write_text(json.dumps(kept) + "\n")

    if not kept:
        typer.echo(
            f"warning: no problem's pass rate lies in [{low}, {high}]; the index list is empty and "
            "`env spec --indices` will refuse it (widen the band, raise --samples or --max-tokens)",
            err=True,
        )
    typer.echo(f"kept {len(kept)} of {len(chosen)} problems (pass rate in [{low}, {high}])")
    typer.echo(f"indices sha256: {ids_sha256(kept)}")
    typer.echo(f"report: {out}")
    typer.echo(f"index list: {plain}  (for `proofpool env spec {env} --indices {plain}`)")


def _measure(
    pool: ModelEnvironment,
    chosen: Sequence[int],
    samples: int,
    max_tokens: int,
    temperature: float,
    seed: int,
    batch: int,
    low: float,
    high: float,
) -> tuple[list[PassRate], list[int]]:
    """Sample and score every problem of `chosen`; (one pass-rate row per problem, the problems
    whose prompt exceeds the pool's limit and were not sampled).

    Row r of the run (problem position p, sample j, r = p * samples + j) is sampled with
    `SamplerSettings(seed, r, temperature)`, so a run is reproducible and no two rows share a
    Gumbel stream, whatever --batch is."""
    from proofpool.worker.engine import EngineConfig, GenerationRequest, InferenceEngine
    from proofpool.worker.sampler import SamplerSettings

    from proofpool.envs.difficulty import PassRate, tally
    from proofpool.inference.model import model_config

    taskset, limits = pool.taskset, pool.tokens
    prompts: dict[int, tuple[int, ...]] = {}
    too_long: list[int] = []
    for index in chosen:
        prompt = taskset.prompt_tokens(str(index))
        if len(prompt) > limits.max_prompt_tokens:
            too_long.append(index)
        else:
            prompts[index] = prompt
    if too_long:
        typer.echo(
            f"skipping {len(too_long)} problems whose prompt exceeds {limits.max_prompt_tokens} tokens "
            f"(first: {too_long[:5]})",
            err=True,
        )
    rates: dict[int, PassRate] = {index: PassRate(index, 0, 0, 0) for index in too_long}
    if not prompts:
        return [rates[index] for index in chosen], too_long

    # KV room for the longest prompt actually met, not the option's ceiling.
    model_len = max(len(p) for p in prompts.values()) + max_tokens
    positions = model_config(pool.model_dir).get("max_position_embeddings")
    if isinstance(positions, int) and model_len > positions:
        raise typer.BadParameter(
            f"longest prompt + --max-tokens is {model_len} tokens, above the model's {positions} positions",
            param_hint="--max-tokens",
        )
    config = EngineConfig(max_model_len=model_len, max_num_seqs=min(MAX_NUM_SEQS, batch * samples))
    order = list(prompts)
    started = time.monotonic()
    kept_so_far = 0
    with InferenceEngine(pool.model_dir, config) as engine:
        typer.echo(f"engine loaded in {engine.load_seconds:.1f}s; sampling {len(order)} problems", err=True)
        generating = time.monotonic()
        for start in range(0, len(order), batch):
            chunk = order[start : start + batch]
            requests = [
                GenerationRequest(
                    prompts[index],
                    SamplerSettings(seed, (start + p) * samples + j, temperature),
                    max_tokens,
                    limits.stop_ids,
                )
                for p, index in enumerate(chunk)
                for j in range(samples)
            ]
            generations = engine.generate(requests)
            for p, index in enumerate(chunk):
                rows = generations[p * samples : (p + 1) * samples]
                row = tally(index, (taskset.judge(str(index), g.completion_tokens) for g in rows))
                rates[index] = row
                kept_so_far += row.rate is not None and low <= row.rate <= high
            del generations, requests  # hidden states are large; keep one chunk's worth at a time
            done = start + len(chunk)
            elapsed = time.monotonic() - started
            typer.echo(f"{done}/{len(order)} problems, {elapsed:.0f}s, {kept_so_far} in band", err=True)
        spent = time.monotonic() - generating
    typer.echo(
        f"sampled {len(order) * samples} completions of {len(order)} problems in {spent:.1f}s "
        f"({len(order) / spent if spent > 0 else float('inf'):.2f} problems/s)",
        err=True,
    )
    return [rates[index] for index in chosen], too_long

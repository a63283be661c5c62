"""What the file-level statistics see: honest files against the cheats that per-row checks miss.

Builds the detection matrix's devnet model (320 warm-up steps), generates honest 64-row files with
the real worker engine (vLLM, seeded sampler, capture), and the cheats that leave most rows
passing the per-row checks:

- `neighbor_checkpoint`: generated and proven with the checkpoint one trainer step away (one AdamW
  step at the trainer's lr 2e-4 from the current weights), claimed as the current one;
- `int8_weights`: the current weights quantized to int8 per output channel and back;
- `temperature_0.8`, `temperature_1.25`: the honest engine at another temperature, the file
  claiming the pool's 1.0;
- `tie_steering`: the current model and the seeded sampler, but at every position where the right
  answer's next token scores within the tie tolerance of the best, that token (reward steering);
- `honest_torch`, no cheat: the current model and the seeded sampler in PyTorch, the rows two
  honest engines disagree on.

Each file is judged with bf16 and fp32 validators (`check_recomputed`), and per file it reports:
rows rejected per row, the tie-steering test (`proofpool.core.sampling.ties`) for several noise scales
b, and the TOPLOC file statistic (`proofpool.inference.check.file_statistic`). One JSON line per
file, then one summary line per (case, precision); then the maximum-likelihood noise scale b of the
honest files, and escape rates of 64-row files resampled from the judged rows: 7 rows (10%) or all
64 from a cheat, the rest honest. A cheat leaves many rows exactly as the assignment determines
them (the seeded sampler makes every token a function of the logits and the seed), so each cheat's
files are also generated honestly with the same seeds, and the 10% files are drawn a second time
from the rows the cheat changed (`rows_from: changed`). All are written to
`bench/results/detection.jsonl`.

Run: `.venv/bin/python -m bench.detection` (about 4-6 minutes on 2 shared cores).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import os
import platform
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from proofpool.worker.rollout import BatchPlan, plan_batch, rollout_samples
from proofpool_arithmetic import ENVIRONMENT
from proofpool_arithmetic.build import ModelSpec
from proofpool_arithmetic.cache import ensure_devnet_model
from proofpool_arithmetic.task import Problem, generate_problems
from proofpool_arithmetic.tokenizer import EOS_ID, encode_text
from proofpool_arithmetic.warmup import WarmupSpec, train

from bench.weights import int8_round_trip
from proofpool.core.rollout import RolloutSample
from proofpool.core.sampling import DEFAULT_TIE_TOLERANCE, SamplingInput, scores, verify_batch
from proofpool.core.sampling.ties import DEFAULT_TIE_ALPHA, tie_test
from proofpool.core.sampling.verify import DEFAULT_TIE_NOISE_SCALE
from proofpool.core.toploc import ChunkCheck, build_proofs, join_proofs
from proofpool.core.toploc.verify import NO_MATCH
from proofpool.inference.check import (
    MAX_FILE_EXP_MISMATCH_RATE,
    MAX_FILE_MANT_ERR_MEAN,
    SampleVerdict,
    check_recomputed,
    file_verdict,
)
from proofpool.inference.model import load_model
from proofpool.inference.prefill import Recomputation, prefill_batch
from proofpool.inference.rollouts import CompletedSample, to_rollout_samples

RESULTS = Path(__file__).resolve().parent / "results" / "detection.jsonl"
FILE_ROWS = 64
GROUP_SIZE = 8
MAX_TOKENS = 8
LONG_MAX_TOKENS = 48
BASE_SEED = 0x5EED_0000
WARMUP = WarmupSpec(steps=320)
"""The detection matrix's model (tests/integration/test_detection_matrix.py)."""
NODE_FILES = 10
"""A node's first files, for the escape-within-10-files figures."""
CHEAT_SEEDS = {
    "temperature_0.8": 500,
    "temperature_1.25": 550,
    "tie_steering": 600,
    "neighbor_checkpoint": 700,
    "int8_weights": 800,
    "honest_torch": 950,
}
"""Each cheat's sampling seeds (BASE_SEED + offset + file): the honest reference files reuse them.
`honest_torch` is no cheat: the current model and the seeded sampler in PyTorch instead of vLLM,
the floor of rows two honest engines disagree on."""
NOISE_SCALES = (0.03125, 0.0625, 0.125)
"""Tie-test noise scales b to report."""


def _problems(seed: int, files: int) -> list[list[Problem]]:
    """FILE_ROWS / GROUP_SIZE problems per file."""
    per_file = FILE_ROWS // GROUP_SIZE
    problems = generate_problems(seed, files * per_file)
    return [problems[i * per_file : (i + 1) * per_file] for i in range(files)]


def _plan(problems: Sequence[Problem], seed: int, temperature: float = 1.0, max_tokens: int = MAX_TOKENS) -> BatchPlan:
    """The worker's own layout of a file: GROUP_SIZE samples per problem, row i with sample index i."""
    return plan_batch(
        ENVIRONMENT.taskset,
        [p.problem_id for p in problems],
        group_size=GROUP_SIZE,
        sampling_seed=seed,
        temperature=temperature,
        max_tokens=max_tokens,
        stop_ids=ENVIRONMENT.tokens.stop_ids,
    )


def honest_files(
    engine: Any, files: list[list[Problem]], seed0: int, temperature: float, claimed: float | None = None
) -> list[list[RolloutSample]]:
    """vLLM files (file f: seed seed0 + f, sample index = row); `claimed` replaces the temperature."""
    plans = [_plan(problems, seed0 + f, temperature) for f, problems in enumerate(files)]
    generations = engine.generate([r for plan in plans for r in plan.requests])
    out = []
    for f, plan in enumerate(plans):
        gens = generations[f * FILE_ROWS : (f + 1) * FILE_ROWS]
        rows = rollout_samples(
            ENVIRONMENT.taskset, plan, gens, sampling_seed=seed0 + f, temperature=temperature, model_version=0
        )
        if claimed is not None:
            rows = [dataclasses.replace(r, temperature=claimed) for r in rows]
        out.append(rows)
    return out


def long_files(engine: Any, n_files: int) -> list[list[RolloutSample]]:
    """Honest multi-chunk files: random prompts at T=10, up to 48 tokens (several TOPLOC chunks)."""
    from proofpool.worker.engine import GenerationRequest
    from proofpool.worker.sampler import SamplerSettings

    gen = torch.Generator().manual_seed(7)
    out = []
    for f in range(n_files):
        lengths = torch.randint(3, 12, (FILE_ROWS,), generator=gen).tolist()
        prompts = [[1, *torch.randint(4, 16, (n,), generator=gen).tolist()] for n in lengths]
        seed = BASE_SEED + 900 + f
        requests = [
            GenerationRequest(tuple(p), SamplerSettings(seed, i, 10.0), LONG_MAX_TOKENS, {EOS_ID})
            for i, p in enumerate(prompts)
        ]
        gens = engine.generate(requests)
        completed = [
            CompletedSample("add-0-0", i, g.request.prompt_tokens, g.completion_tokens, g.hidden_states)
            for i, g in enumerate(gens)
        ]
        out.append(
            to_rollout_samples(ENVIRONMENT.taskset, completed, sampling_seed=seed, temperature=10.0, model_version=0)
        )
    return out


Picker = Callable[[torch.Tensor, int, int, int, list[int], Problem], int]
"""(logits row [1, vocab], seed, sample index, position, tokens so far, problem) -> the token."""


def seeded_pick(logits: torch.Tensor, seed: int, index: int, position: int, _sofar: list[int], _p: Problem) -> int:
    """The honest seeded sampler at T=1."""
    return int(scores(logits, 1.0, seed, index, torch.tensor([position]))[0].argmax())


def steering_pick(
    logits: torch.Tensor, seed: int, index: int, position: int, sofar: list[int], problem: Problem
) -> int:
    """The seeded sampler, except that the right answer's next token wins whenever it scores within
    the tie tolerance of the best (the sampling check tolerates it)."""
    row = scores(logits, 1.0, seed, index, torch.tensor([position]))[0]
    target = [*encode_text(problem.target), EOS_ID]
    best = int(row.argmax())
    if sofar == target[: len(sofar)] and len(sofar) < len(target):
        want = target[len(sofar)]
        if float(row[best] - row[want]) <= DEFAULT_TIE_TOLERANCE:
            return want
    return best


def cheater_files(model: Any, files: list[list[Problem]], seed0: int, pick: Picker) -> list[list[RolloutSample]]:
    """Files generated with PyTorch by `pick` on `model`'s logits and proven with `model`. Rows whose
    prompts have one length run as one batch (no padding needed), one forward per position."""
    out = []
    with torch.inference_mode():
        for f, problems in enumerate(files):
            plan = _plan(problems, seed0 + f)
            prompts, ids, groups = [list(r.prompt_tokens) for r in plan.requests], plan.problem_ids, plan.group_ids
            completions: list[list[int]] = [[] for _ in prompts]
            by_length: dict[int, list[int]] = {}
            for i, prompt in enumerate(prompts):
                by_length.setdefault(len(prompt), []).append(i)
            for members in by_length.values():
                live = list(members)
                for position in range(MAX_TOKENS):
                    if not live:
                        break
                    batch = torch.tensor([list(prompts[i]) + completions[i] for i in live])
                    logits = model(input_ids=batch).logits[:, -1].float()
                    for row, i in enumerate(live):
                        sofar = completions[i]
                        sofar.append(
                            pick(logits[row : row + 1], seed0 + f, i, position, list(sofar), problems[groups[i]])
                        )
                    live = [i for i in live if completions[i][-1] != EOS_ID]
            recs = prefill_batch(model, list(zip(prompts, completions, strict=True)))
            rows = [
                RolloutSample(
                    problem_id=ids[i],
                    group_id=groups[i],
                    prompt_tokens=tuple(prompt),
                    completion_tokens=tuple(tokens),
                    reward=0.0,
                    advantage=0.0,
                    sampling_seed=seed0 + f,
                    temperature=1.0,
                    model_version=0,
                    proofs=join_proofs(build_proofs(rec.hidden_states)),
                )
                for i, (prompt, tokens, rec) in enumerate(zip(prompts, completions, recs, strict=True))
            ]
            out.append(rows)
            print(f"cheater file {f + 1}/{len(files)}", file=sys.stderr, flush=True)
    return out


def neighbor_checkpoint(path: Path, steps: int) -> Any:
    """The weights `steps` AdamW steps at the trainer's lr (2e-4) away, stored in bf16 as a checkpoint is."""
    model = load_model(path, "fp32")
    train(model, WarmupSpec(steps=steps, lr=2e-4, data_seed=4242))
    return model.to(torch.bfloat16).eval()


def int8_copy(path: Path) -> Any:
    """The weights quantized to int8 per output channel (symmetric, absmax) and dequantized."""
    model = load_model(path, "fp32")
    int8_round_trip(model)
    return model.to(torch.bfloat16).eval()


def judge_file(
    validator: Any, rows: Sequence[RolloutSample], recs: Sequence[Recomputation] | None = None
) -> tuple[dict[str, Any], list[SampleVerdict]]:
    """Per-row verdicts and the file statistics of one file (and the verdicts, for resampling)."""
    recs = recs or prefill_batch(validator, [(s.prompt_tokens, s.completion_tokens) for s in rows])
    verdicts = check_recomputed(
        rows, recs, list(range(len(rows))), stop_ids={EOS_ID}, max_tokens=max(MAX_TOKENS, LONG_MAX_TOKENS)
    )
    whole = file_verdict(verdicts)
    out: dict[str, Any] = {
        "rows": len(rows),
        "tokens": sum(len(s.completion_tokens) for s in rows),
        "rejected_rows": sum(not v.accepted for v in verdicts),
        "reasons": sorted({str(v.reason) for v in verdicts if not v.accepted}),
        "file_reason": whole.reason,
        "escaped": whole.accepted and all(v.accepted for v in verdicts),
    }
    inputs = [
        SamplingInput(r.logits, s.completion_tokens, s.temperature, s.sampling_seed, i)
        for i, (s, r) in enumerate(zip(rows, recs, strict=True))
    ]
    passing = [i for i, v in enumerate(verdicts) if v.accepted]
    for b in NOISE_SCALES:
        checks = verify_batch(inputs, {EOS_ID}, LONG_MAX_TOKENS, tie_noise_scale=b)
        test = tie_test(checks[i] for i in passing)
        out[f"tie_b{b:g}"] = {
            "near_ties": test.near_ties,
            "flips": test.flips,
            "expected": round(test.expected_flips, 3),
            "log_e": round(test.log_e_value, 3),
            "log10_p": round(math.log10(max(test.p_value, 1e-300)), 2),
        }
    gaps = [v.sampling.max_gap for v in verdicts if v.accepted and v.sampling.tolerated_ties]
    out["flip_gaps"] = [round(g, 4) for g in gaps]
    out["file_statistic"] = {
        k: (round(v, 6) if isinstance(v, float) else v)
        for k, v in dataclasses.asdict(whole.statistic).items()
        if k != "alpha"
    }
    chunks = _chunks(verdicts[i] for i in passing)
    out["chunk_mant_max"] = round(max((c.mant_err_mean for c in chunks), default=0.0), 4)
    out["chunk_exp_max"] = max((c.exp_mismatches for c in chunks), default=0)
    return out, verdicts


def _chunks(verdicts: Iterable[SampleVerdict]) -> list[ChunkCheck]:
    return [c for v in verdicts for c in v.toploc if c.error is None and c.mant_err_mean < NO_MATCH]


def noise_scale_fit(inputs: Sequence[SamplingInput]) -> dict[str, Any]:
    """Maximum-likelihood b of the honest-noise model on honest rows: at each near-tie position the
    engine flips with probability p_i(b) (`SamplingCheck.flip_probs`); the log-likelihood of the
    observed flips over a grid of b."""
    grid = np.geomspace(0.002, 0.25, 36)
    best: tuple[float, float] = (-math.inf, 0.0)
    for b in grid:
        checks = verify_batch(inputs, {EOS_ID}, LONG_MAX_TOKENS, tie_noise_scale=float(b))
        p = np.clip(np.array([q for c in checks for q in c.flip_probs]), 1e-300, 1 - 1e-12)
        hit = np.array([f for c in checks for f in c.flipped], dtype=bool)
        loglik = float(np.log(p[hit]).sum() + np.log1p(-p[~hit]).sum())
        best = max(best, (loglik, float(b)))
    checks = verify_batch(inputs, {EOS_ID}, LONG_MAX_TOKENS)
    return {
        "b_mle": round(best[1], 4),
        "near_ties": sum(c.near_ties for c in checks),
        "flips": sum(c.tolerated_ties for c in checks),
    }


def resampled_escape(
    honest: Sequence[SampleVerdict], cheat: Sequence[SampleVerdict], cheated_rows: int, trials: int, seed: int
) -> dict[str, Any]:
    """Escape rate of 64-row files made of `cheated_rows` rows drawn from `cheat` and the rest from
    `honest` (rows are judged independently, so a file's verdict is a function of its rows'). Then
    the files in runs of NODE_FILES, as one node's first files: `escape_node_files` is the share of
    runs with no file rejected, `escape_node_e_value` of those whose running product of the tie
    test's e-values also never reaches 1 / alpha (the per-node test, not wired yet)."""
    rng = np.random.default_rng(seed)
    escaped, reasons = [], Counter[str]()
    log_e = []
    for _ in range(trials):
        rows = [cheat[i] for i in rng.choice(len(cheat), cheated_rows, replace=len(cheat) < cheated_rows)]
        rows += [honest[i] for i in rng.choice(len(honest), FILE_ROWS - cheated_rows, replace=False)]
        failed = next((v for v in rows if not v.accepted), None)
        whole = file_verdict(rows)
        log_e.append(whole.ties.log_e_value)
        if failed is not None:
            reasons[str(failed.reason)] += 1
        elif not whole.accepted:
            reasons[str(whole.reason)] += 1
        escaped.append(failed is None and whole.accepted)
    runs = trials // NODE_FILES
    node_escape = node_e_escape = 0
    for r in range(runs):
        part = slice(r * NODE_FILES, (r + 1) * NODE_FILES)
        if all(escaped[part]):
            node_escape += 1
            if max(np.cumsum(log_e[part])) < -math.log(DEFAULT_TIE_ALPHA):
                node_e_escape += 1
    return {
        "trials": trials,
        "cheated_rows": cheated_rows,
        "escape": sum(escaped) / trials,
        "reasons": dict(reasons),
        "escape_node_files": node_escape / runs,
        "escape_node_e_value": node_e_escape / runs,
        "runs": runs,
    }


def changed_rows(cheat: Sequence[Sequence[RolloutSample]], honest: Sequence[Sequence[RolloutSample]]) -> list[bool]:
    """Per row of the cheat's files: do its tokens differ from the honest engine's for the same
    assignment (problem, seed, sample index, the pool's temperature)? A cheat that leaves a row's
    tokens as the assignment determines them has not changed what the trainer sees in that row."""
    return [
        c.completion_tokens != h.completion_tokens
        for cheat_file, honest_file in zip(cheat, honest, strict=True)
        for c, h in zip(cheat_file, honest_file, strict=True)
    ]


def main() -> None:
    from proofpool.worker.engine import InferenceEngine

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--honest-files", type=int, default=24)
    parser.add_argument("--cheat-files", type=int, default=8)
    parser.add_argument("--long-files", type=int, default=6)
    parser.add_argument("--trials", type=int, default=3000)
    args = parser.parse_args()
    started = time.monotonic()
    path = ensure_devnet_model(ModelSpec(), WARMUP, progress=None)
    validators = {"bf16": load_model(path, "bf16"), "fp32": load_model(path, "fp32")}
    engine = InferenceEngine(path)
    cases: dict[str, list[list[RolloutSample]]] = {}
    honest_problems = _problems(2024, args.honest_files)
    cases["honest"] = honest_files(engine, honest_problems, BASE_SEED, 1.0)
    cases["honest_long"] = long_files(engine, args.long_files)
    cheat_problems = _problems(4048, args.cheat_files)
    cases["temperature_0.8"] = honest_files(
        engine, cheat_problems, BASE_SEED + CHEAT_SEEDS["temperature_0.8"], 0.8, 1.0
    )
    cases["temperature_1.25"] = honest_files(
        engine, cheat_problems, BASE_SEED + CHEAT_SEEDS["temperature_1.25"], 1.25, 1.0
    )
    references = {
        case: honest_files(engine, cheat_problems, BASE_SEED + offset, 1.0) for case, offset in CHEAT_SEEDS.items()
    }
    engine.close()
    current = validators["bf16"]
    cases["tie_steering"] = cheater_files(
        current, cheat_problems, BASE_SEED + CHEAT_SEEDS["tie_steering"], steering_pick
    )
    cases["neighbor_checkpoint"] = cheater_files(
        neighbor_checkpoint(path, 1), cheat_problems, BASE_SEED + CHEAT_SEEDS["neighbor_checkpoint"], seeded_pick
    )
    cases["int8_weights"] = cheater_files(
        int8_copy(path), cheat_problems, BASE_SEED + CHEAT_SEEDS["int8_weights"], seeded_pick
    )
    cases["honest_torch"] = cheater_files(current, cheat_problems, BASE_SEED + CHEAT_SEEDS["honest_torch"], seeded_pick)
    changed = {case: changed_rows(cases[case], references[case]) for case in CHEAT_SEEDS}
    lines: list[dict[str, Any]] = [_setup()]
    for case, moved in changed.items():
        lines.append({"kind": "changed", "case": case, "rows": len(moved), "changed_rows": sum(moved)})
        print(json.dumps(lines[-1]), flush=True)
    pools: dict[tuple[str, str], list[SampleVerdict]] = {}
    for case, files in cases.items():
        for precision, validator in validators.items():
            judged = [judge_file(validator, rows) for rows in files]
            results = [r for r, _ in judged]
            pools[case, precision] = [v for _, verdicts in judged for v in verdicts]
            print(f"judged {case} in {precision}", file=sys.stderr, flush=True)
            for f, r in enumerate(results):
                lines.append({"kind": "file", "case": case, "precision": precision, "file": f, **r})
            lines.append(_summary(case, precision, results, pools[case, precision]))
            print(json.dumps(lines[-1]), flush=True)
    for precision, validator in validators.items():
        inputs = []
        for rows in cases["honest"] + cases["honest_long"]:
            recs = prefill_batch(validator, [(s.prompt_tokens, s.completion_tokens) for s in rows])
            inputs += [
                SamplingInput(r.logits, s.completion_tokens, s.temperature, s.sampling_seed, i)
                for i, (s, r) in enumerate(zip(rows, recs, strict=True))
            ]
        lines.append({"kind": "noise_fit", "precision": precision, **noise_scale_fit(inputs)})
        print(json.dumps(lines[-1]), flush=True)
    for precision in validators:
        honest = pools["honest", precision]
        lines.append(
            {"kind": "resampled", "case": "honest", "precision": precision}
            | resampled_escape(honest, honest, 0, args.trials, 0)
        )
        print(json.dumps(lines[-1]), flush=True)
        for case in CHEAT_SEEDS:
            cheat = pools[case, precision]
            touched = [v for v, moved in zip(cheat, changed[case], strict=True) if moved]
            for rows, cheated_rows in (
                ("all", math.ceil(0.1 * FILE_ROWS)),
                ("all", FILE_ROWS),
                ("changed", math.ceil(0.1 * FILE_ROWS)),
            ):
                pool = cheat if rows == "all" else touched
                head = {"kind": "resampled", "case": case, "precision": precision, "rows_from": rows}
                if not pool:
                    lines.append(head | {"cheated_rows": cheated_rows, "pool_rows": 0})
                else:
                    lines.append(
                        head
                        | {"pool_rows": len(pool)}
                        | resampled_escape(honest, pool, cheated_rows, args.trials, cheated_rows)
                    )
                print(json.dumps(lines[-1]), flush=True)
    lines.append({"kind": "timing", "seconds": round(time.monotonic() - started, 1)})
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text("".join(json.dumps(line) + "\n" for line in lines))
    print(json.dumps(lines[-1]))


def _setup() -> dict[str, Any]:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False)
    return {
        "kind": "setup",
        "date": datetime.date.today().isoformat(),
        "commit": commit.stdout.strip() or None,
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "torch": torch.__version__,
        "tie_noise_scale": DEFAULT_TIE_NOISE_SCALE,
        "tie_alpha": DEFAULT_TIE_ALPHA,
        "max_file_mant_err_mean": MAX_FILE_MANT_ERR_MEAN,
        "max_file_exp_mismatch_rate": MAX_FILE_EXP_MISMATCH_RATE,
    }


def _summary(
    case: str, precision: str, results: Sequence[dict[str, Any]], verdicts: Sequence[SampleVerdict]
) -> dict[str, Any]:
    """Per (case, precision): per-row rejection rate, files with a rejected row, statistic ranges."""
    rows = sum(r["rows"] for r in results)
    chunks = _chunks(v for v in verdicts if v.accepted)
    mant = np.array([c.mant_err_mean for c in chunks])
    exp = np.array([c.exp_mismatches for c in chunks])
    out: dict[str, Any] = {
        "kind": "summary",
        "case": case,
        "precision": precision,
        "files": len(results),
        "rows": rows,
        "row_reject_rate": round(sum(r["rejected_rows"] for r in results) / rows, 4),
        "files_with_rejected_row": sum(r["rejected_rows"] > 0 for r in results),
        "files_escaped": sum(r["escaped"] for r in results),
        "file_reasons": dict(Counter(str(r["file_reason"]) for r in results if r["rejected_rows"] == 0)),
        "chunks": len(chunks),
        "chunk_mant_quantiles": [round(float(np.quantile(mant, q)), 3) for q in (0.5, 0.99, 1.0)] if len(mant) else [],
        "chunk_exp_quantiles": [int(np.quantile(exp, q)) for q in (0.5, 0.99, 1.0)] if len(exp) else [],
        "chunks_over_2_5": int((mant > 2.5).sum()),
    }
    for b in NOISE_SCALES:
        key = f"tie_b{b:g}"
        ps = [r[key]["log10_p"] for r in results]
        out[key] = {
            "near_ties": sum(r[key]["near_ties"] for r in results),
            "flips": sum(r[key]["flips"] for r in results),
            "min_log10_p": min(ps),
            "median_log10_p": float(np.median(ps)),
            "files_below_alpha": sum(p < math.log10(DEFAULT_TIE_ALPHA) for p in ps),
        }
    flips = [g for r in results for g in r["flip_gaps"]]
    out["max_flip_gap"] = max(flips, default=0.0)
    for key in ("mant_err_mean", "exp_mismatch_rate"):
        values = [r["file_statistic"][key] for r in results]
        out[f"file_{key}"] = [round(min(values), 4), round(float(np.median(values)), 4), round(max(values), 4)]
    return out


if __name__ == "__main__":
    main()

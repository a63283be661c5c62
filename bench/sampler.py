"""What the seeded Gumbel-max sampler costs per generated token, by vocabulary size.

The worker's vLLM logits processor (`proofpool.worker.sampler.GumbelMaxLogitsProcessor`) draws the
protocol's counter-based noise for every row of every decode step (`sample_tokens`, one row at a
time), and validators recompute it for every checked position (`score_blocks`). Its cost grows
with the vocabulary: 16 tokens on the devnet, 49,152 for SmolLM2, 151,936 for Qwen. Prints one
JSON line per (figure, vocabulary, path) and writes `bench/results/sampler.jsonl`:

- `worker_row`: `sample_tokens` on one [1, vocab] row, as the logits processor calls it: the
  milliseconds it adds to one generated token;
- `validator_rows`: `scores` on [256, vocab] (a validator's batch of positions), ms per row;
- `warm_up`: seconds `gumbel_kernel.warm_up()` took in this process (a compile on a fresh
  machine, else a load from numba's cache).

`path`: `fused` is the compiled kernel the code uses (`gumbel_kernel`), `numpy` the numpy
reference it is tested against (`reference_sample_tokens`, `reference_scores`).

The fastest of several repeats is kept (the machine is shared). Figures, not pass/fail. Run:
`.venv/bin/python -m bench.sampler`.
"""

from __future__ import annotations

import json
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from proofpool.core.sampling import gumbel_kernel
from proofpool.core.sampling.gumbel import reference_sample_tokens, reference_scores, sample_tokens, scores

VOCABULARIES = (16, 49_152, 151_936)
REPEATS = 9
RESULTS = Path(__file__).parent / "results" / "sampler.jsonl"
PATHS = {"numpy": (reference_sample_tokens, reference_scores), "fused": (sample_tokens, scores)}


def fastest(run: Callable[[], object], repeats: int = REPEATS) -> float:
    """Seconds of the fastest of `repeats` runs."""
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    return best


def measure(vocab: int) -> list[dict[str, Any]]:
    """Both figures' cost at one vocabulary size, on each path."""
    generator = torch.Generator().manual_seed(vocab)
    row = torch.randn(1, vocab, generator=generator) * 4
    rows = torch.randn(256, vocab, generator=generator) * 4
    positions = torch.arange(256)
    steps = 50
    lines = []
    for path, (sample, score) in PATHS.items():
        worker = fastest(lambda sample=sample: [sample(row, 1.0, 7, 3, positions[i : i + 1]) for i in range(steps)])
        validator = fastest(lambda score=score: score(rows, 1.0, 7, 3, positions))
        worker, validator = worker / steps, validator / rows.shape[0]
        lines += [
            {"figure": "worker_row", "vocab": vocab, "path": path, "ms_per_token": round(worker * 1e3, 4)},
            {"figure": "validator_rows", "vocab": vocab, "path": path, "ms_per_row": round(validator * 1e3, 4)},
        ]
    return lines


def main() -> None:
    torch.set_num_threads(1)
    started = time.perf_counter()
    gumbel_kernel.warm_up()
    lines = [{"figure": "warm_up", "path": "fused", "seconds": round(time.perf_counter() - started, 3)}]
    print(json.dumps(lines[0]), flush=True)
    for vocab in VOCABULARIES:
        for line in measure(vocab):
            print(json.dumps(line), flush=True)
            lines.append(line)
    machine = {"machine": platform.processor() or platform.machine(), "threads": 1}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text("".join(json.dumps(line | machine) + "\n" for line in lines))


if __name__ == "__main__":
    main()

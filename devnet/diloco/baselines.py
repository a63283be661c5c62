"""The baselines of the training pool devnet: the same rounds without the market
(`proofpool.devnet.diloco.simulate`), computed in the same run on the shards of the market's honest
nodes. DiLoCo with int8 pseudo-gradients (what the market should reproduce), with fp32 ones (the
codec's cost), one node training alone H steps a round (the DiLoCo paper's single-worker baseline:
DiLoCo's wall-clock time) and data parallel with DiLoCo's compute (H steps a round, each averaging
every node's batch). A thread runs them beside the market, from the first checkpoint on."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from proofpool.devnet.diloco.report import MODEL_LOCK, Baselines
from proofpool.devnet.interrupt import check_interrupted

from proofpool.core.errors import ProofpoolError

if TYPE_CHECKING:
    import torch
    from proofpool.devnet.diloco.run import TrainingRun, Watch
    from proofpool.devnet.run import Say

    from proofpool.core.diloco.spec import DilocoSpec


class BaselineThread:
    """The simulation's runs on the pool's data, in a thread beside the market, started (as a
    follow-loop hook) once checkpoint 1 is out: not while a dozen processes start on the same cores.
    torch releases the interpreter while it computes, on one intra-op thread."""

    def __init__(
        self,
        model_dir: Path,
        spec: DilocoSpec,
        tokens: torch.Tensor,
        nodes: list[str],
        pool_id: int,
        rounds: int,
        say: Say,
    ) -> None:
        self.args = (model_dir, tokens, spec, nodes, pool_id, rounds)
        self.say = say
        self._result: Baselines | None = None
        self._error: Exception | None = None
        self._thread = threading.Thread(target=self._work, name="diloco-baselines", daemon=True)

    def __call__(self, _run: TrainingRun, watch: Watch) -> None:
        if watch.version >= 1 and self._thread.ident is None:
            self.start()

    def start(self) -> None:
        self._thread.start()
        self.say("baselines started beside the market: the same rounds simulated on the honest nodes' shards")

    def result(self, say: Say) -> Baselines:
        if self._thread.ident is None:
            self.start()
        if self._thread.is_alive():
            say("waiting for the baselines (simulation) to finish")
        while self._thread.is_alive():
            check_interrupted()
            self._thread.join(0.5)
        if self._error is not None:
            raise ProofpoolError(f"the baseline simulation failed: {self._error}") from self._error
        assert self._result is not None
        return self._result

    def _work(self) -> None:
        try:
            self._result = compute_baselines(*self.args)
        except Exception as exc:  # noqa: BLE001 - not swallowed: `result` raises it in the main thread
            self._error = exc


def compute_baselines(
    model_dir: Path, tokens: torch.Tensor, spec: DilocoSpec, nodes: list[str], pool_id: int, rounds: int
) -> Baselines:
    """int8 and fp32 DiLoCo, a single node and data parallel for `rounds` rounds on the shards of
    `nodes` in pool `pool_id` (the market's honest nodes: the same rows they train on), without the
    market (`proofpool.devnet.diloco.simulate`). The single node trains H steps per round on one
    node's shard (the DiLoCo paper's baseline, `single_node_baseline`); data parallel takes H steps
    per round, each on every node's batch (DiLoCo's compute)."""
    import torch
    from proofpool.devnet.diloco.simulate import data_parallel_baseline, simulate, single_node_baseline

    torch.set_num_threads(1)
    started = time.monotonic()
    shared = {"workers": nodes, "rounds": rounds, "pool_id": pool_id}
    runs = (
        lambda: simulate(model_dir, tokens, spec, codec="int8", **shared),
        lambda: simulate(model_dir, tokens, spec, codec="fp32", **shared),
        lambda: single_node_baseline(model_dir, tokens, spec, **shared),
        lambda: data_parallel_baseline(model_dir, tokens, spec, **shared),
    )
    curves = []
    for run in runs:
        with MODEL_LOCK:  # the auditor's turn comes between two runs
            curves.append(run())
    int8, fp32, single, dp = curves
    return Baselines(
        workers=len(nodes),
        rounds=rounds,
        diloco_int8=list(int8.eval_losses),
        diloco_fp32=list(fp32.eval_losses),
        single_node=list(single.eval_losses),
        data_parallel=list(dp.eval_losses),
        seconds=round(time.monotonic() - started, 1),
    )

"""Replay's detection matrix: every train cheat is outside the tolerance, no honest file is.

A validator replays a file's H inner steps from the published checkpoint and the node's seeded rows
and compares the file's dequantized values with the fp32 replay (`compare_update`). Here every
`TrainCheat` of `proofpool.devnet.diloco.cheats` (the devnet's cheating workers) is encoded as a worker
would upload it and compared with an independent replay: each must be outside the spec's tolerance
(`pseudo_gradient_mismatch`), each honest file inside it, including against a replay made in another
process forced onto another CPU code path (`ATEN_CPU_CAPABILITY=default`) and thread count.

The pool is the devnet's (`build_devnet_pool`) at test size, on a generated corpus; checkpoint 1 is
made by one simulated round, so the `stale` cheat has an older checkpoint to train from.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from proofpool.devnet.diloco.cheats import TrainCheat, TrainCheater, cheat_update
from proofpool.devnet.diloco.corpus import build_devnet_pool
from proofpool.devnet.diloco.simulate import SIM_POOL_ID, sim_nodes, simulate
from safetensors.torch import load_file

from proofpool.core.diloco.compare import compare_update
from proofpool.core.diloco.shard import node_rows
from proofpool.core.diloco.update_file import UpdateMeta, encode_update, read_update
from proofpool.training.inner import TrainJob, load_model, parameter_shapes, run_inner
from tests.fixtures.diloco_corpus import generated_corpus

ROUND = 1
"""The round judged: trained from checkpoint 1, so checkpoint 0 is the stale one."""
MIN_CHEAT_DISTANCE = 0.3
"""Every cheat lands this far from the replay at least: several times the tolerance, not at its edge."""

REPLAY_SCRIPT = """
import json, sys
from pathlib import Path
import torch
from safetensors.torch import save_file
from proofpool.core.diloco.spec import InnerSpec
from proofpool.training.dataset import load_dataset
from proofpool.training.inner import TrainJob, run_inner

args = json.loads(sys.argv[1])
torch.set_num_threads(args["threads"])
job = TrainJob(
    args["pool_id"], args["round"], args["node"], Path(args["checkpoint"]),
    load_dataset(Path(args["dataset"]), args["dataset_sha256"]), args["rows"], InnerSpec(**args["inner"]),
)
save_file(run_inner(job).pseudo_gradient, args["out"])
print(json.dumps({"capability": torch.backends.cpu.get_cpu_capability(), "threads": torch.get_num_threads()}))
"""


@pytest.fixture(scope="module")
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def pool(tmp_path_factory, one_thread):
    """The devnet pool at test size, its spec and tokens, and checkpoints 0 and 1."""
    built = build_devnet_pool(
        tmp_path_factory.mktemp("diloco-pool"), vocab=320, seq_len=32, hidden=32, layers=2, texts=generated_corpus()
    )
    spec = built.devnet_spec(steps=8, batch_size=4, eval_sequences=16)
    tokens = built.tokens()
    work = tmp_path_factory.mktemp("diloco-sim")
    simulate(built.model_dir, tokens, spec, workers=3, rounds=ROUND, work_dir=work)
    checkpoints = {0: built.model_dir, ROUND: work / f"v{ROUND}"}
    shapes = parameter_shapes(load_model(checkpoints[ROUND]))
    return built, spec, tokens, checkpoints, shapes


def job_of(pool, node: str) -> TrainJob:
    _, spec, tokens, checkpoints, _ = pool
    rows = node_rows(spec, SIM_POOL_ID, ROUND, node)
    return TrainJob(SIM_POOL_ID, ROUND, node, checkpoints[ROUND], tokens, rows, spec.inner)


def upload(pool, job: TrainJob, result) -> bytes:
    """The file a worker uploads for `result` (what validators download)."""
    _, spec, _, _, _ = pool
    meta = UpdateMeta(
        pool_id=job.pool_id,
        node=job.node,
        round=job.round,
        base_manifest_sha256="ab" * 32,
        spec_sha256=spec.sha256(),
        codec=spec.codec.name,
        block_size=spec.codec.block_size,
        inner_steps=spec.inner.steps,
        tokens=spec.work_units,
        losses=tuple(result.losses),
    )
    return encode_update(result.pseudo_gradient, meta)


def judge(pool, data: bytes, replay: dict[str, torch.Tensor]):
    """The validator's comparison of an uploaded file with its replay's pseudo-gradient."""
    _, spec, _, _, shapes = pool
    update = read_update(data, shapes, codec=spec.codec.name, block_size=spec.codec.block_size)
    return compare_update(update, replay, spec.validation.tolerance)


@pytest.fixture(scope="module")
def cheater_replay(pool):
    """The validators' replay of the cheating node's job (independent of every cheat's own run)."""
    job = job_of(pool, sim_nodes(4)[3])
    return job, run_inner(job)


@pytest.mark.parametrize("kind", list(TrainCheat))
def test_every_cheat_is_outside_the_tolerance(pool, cheater_replay, kind):
    _, spec, _, checkpoints, _ = pool
    job, replay = cheater_replay
    cheat = cheat_update(kind, job, previous_checkpoint_dir=checkpoints[ROUND - 1], training_rows=spec.training_rows)
    assert len(cheat.losses) == spec.inner.steps and cheat.tokens == spec.work_units  # a well-formed file
    comparison = judge(pool, upload(pool, job, cheat), replay.pseudo_gradient)
    message = f"{kind}: relative L2 {comparison.relative_l2:.4f} (tolerance {spec.validation.tolerance})"
    assert not comparison.within and not comparison.bitwise, message
    assert comparison.relative_l2 >= MIN_CHEAT_DISTANCE, message


def test_the_scaled_cheat_keeps_the_honest_codes(pool, cheater_replay):
    """Why replay compares dequantized values: x10 leaves the int8 codes as they were (but the few
    whose scaled value rounds across a bin edge in float32); only the lookup tables scale."""
    _, spec, _, _, shapes = pool
    job, replay = cheater_replay
    scaled_file = upload(pool, job, cheat_update(TrainCheat.SCALED, job, honest=lambda _: replay))
    honest = read_update(upload(pool, job, replay), shapes, codec=spec.codec.name)
    scaled = read_update(scaled_file, shapes, codec=spec.codec.name)
    same = sum(int((honest.quantized[k].codes == scaled.quantized[k].codes).sum()) for k in shapes)
    total = sum(honest.quantized[k].codes.numel() for k in shapes)
    assert same >= 0.999 * total, f"{total - same} of {total} codes changed"
    assert not judge(pool, scaled_file, replay.pseudo_gradient).within


def test_the_train_cheater_strategy_cheats_from_round_one(pool, cheater_replay):
    """The worker's strategy: `stale` fetches checkpoint round - 1 and is caught; in round 0 it is honest."""
    _, spec, tokens, checkpoints, _ = pool
    job, replay = cheater_replay
    asked: list[int] = []

    def previous(version: int) -> Path:
        asked.append(version)
        return checkpoints[version]

    cheater = TrainCheater(TrainCheat.STALE, previous_checkpoint=previous, training_rows=spec.training_rows)
    result = cheater.pseudo_gradient(job, run_inner)
    assert asked == [ROUND - 1]
    assert not judge(pool, upload(pool, job, result), replay.pseudo_gradient).within
    rows = node_rows(spec, job.pool_id, 0, job.node)
    first = TrainJob(job.pool_id, 0, job.node, checkpoints[0], tokens, rows, spec.inner)
    honest = cheater.pseudo_gradient(first, run_inner)
    assert asked == [ROUND - 1]
    assert judge(pool, upload(pool, first, honest), run_inner(first).pseudo_gradient).bitwise


def test_honest_nodes_are_within_the_tolerance(pool):
    _, spec, _, _, _ = pool
    for node in sim_nodes(3):
        job = job_of(pool, node)
        comparison = judge(pool, upload(pool, job, run_inner(job)), run_inner(job).pseudo_gradient)
        message = f"honest {node}: relative L2 {comparison.relative_l2:.5f}"
        assert comparison.within and comparison.bitwise, message  # same machine and threads: bitwise
        assert comparison.relative_l2 <= spec.validation.tolerance / 5, message  # only the int8 error


def test_an_honest_file_passes_a_replay_on_another_cpu_code_path(pool, tmp_path):
    """A validator whose CPU runs other kernels (ATEN_CPU_CAPABILITY=default: no AVX) with another
    thread count replays the honest file within the tolerance."""
    built, spec, _, checkpoints, _ = pool
    job = job_of(pool, sim_nodes(3)[0])
    worker = run_inner(job)
    out = tmp_path / "replay.safetensors"
    args = {
        "pool_id": job.pool_id,
        "round": job.round,
        "node": job.node,
        "checkpoint": str(checkpoints[ROUND]),
        "dataset": str(built.dataset_path),
        "dataset_sha256": built.dataset_sha256,
        "rows": job.rows,
        "inner": {name: getattr(spec.inner, name) for name in spec.inner.__dataclass_fields__},
        "threads": 2,
        "out": str(out),
    }
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "default", "OMP_NUM_THREADS": "2"}
    done = subprocess.run(
        [sys.executable, "-c", REPLAY_SCRIPT, json.dumps(args)], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    child = json.loads(done.stdout.strip().splitlines()[-1])
    assert child == {"capability": "DEFAULT", "threads": 2}

    comparison = judge(pool, upload(pool, job, worker), load_file(str(out)))
    assert comparison.within, f"cross-CPU replay: relative L2 {comparison.relative_l2:.5f}"
    assert comparison.relative_l2 <= spec.validation.tolerance / 5, f"relative L2 {comparison.relative_l2:.5f}"


def test_the_devnet_pool_is_cached_and_rebuilt_byte_for_byte(pool, tmp_path):
    """Same settings and corpus: the cached directory again, and elsewhere the same files."""
    built = pool[0]
    settings = {"vocab": 320, "seq_len": 32, "hidden": 32, "layers": 2, "texts": generated_corpus()}
    again = build_devnet_pool(built.root.parent, **settings)
    assert again == built
    fresh = build_devnet_pool(tmp_path, **settings)
    assert fresh.root != built.root and fresh.root.name == built.root.name
    assert fresh.dataset_sha256 == built.dataset_sha256
    for name in ("model.safetensors", "config.json", "tokenizer.json"):
        assert (fresh.model_dir / name).read_bytes() == (built.model_dir / name).read_bytes(), name
    other = build_devnet_pool(built.root.parent, **{**settings, "hidden": 64})
    assert other.root != built.root

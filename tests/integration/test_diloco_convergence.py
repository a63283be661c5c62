"""DiLoCo on the devnet's pool converges as the issue promises, and replay filtering undoes a cheater.

Twelve rounds of four workers (`proofpool.devnet.diloco.simulate`, the real shard, inner, codec, file,
comparison and outer-step functions, without the market) on the devnet pool's recipe (H=8, batch 8,
inner AdamW lr 1e-3, outer Nesterov lr 0.7 momentum 0.9, int8 per tensor) with the model at test
size, on a generated Python-like corpus (the devnet's own, the standard library's sources, is outside
the repository):

- int8 DiLoCo ends at or below the single-node baseline (one worker, as many steps) and within 5% of
  data parallel with the same compute, and within 1% of fp32 DiLoCo;
- with a fifth node uploading x10 its honest update, the naive average ends worse, while dropping the
  files replay rejects gives exactly the four honest nodes' curve.
"""

from __future__ import annotations

import pytest
import torch
from proofpool.devnet.diloco.cheats import TrainCheat
from proofpool.devnet.diloco.corpus import build_devnet_pool
from proofpool.devnet.diloco.simulate import data_parallel_baseline, sim_nodes, simulate, single_node_baseline

from tests.fixtures.diloco_corpus import generated_corpus

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

ROUNDS = 12
WORKERS = 4
CORPUS_FUNCTIONS = 4000
DP_MARGIN = 0.05
CODEC_MARGIN = 0.01


@pytest.fixture(scope="module")
def devnet(tmp_path_factory):
    """The devnet pool (test-size model, a generated corpus), its spec and tokens; one torch thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    pool = build_devnet_pool(
        tmp_path_factory.mktemp("diloco-devnet"), hidden=32, seq_len=32, texts=generated_corpus(count=CORPUS_FUNCTIONS)
    )
    yield pool, pool.devnet_spec(), pool.tokens()
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def honest(devnet):
    pool, spec, tokens = devnet
    return simulate(pool.model_dir, tokens, spec, workers=sim_nodes(WORKERS), rounds=ROUNDS, codec="int8")


def test_int8_diloco_beats_a_single_node_and_matches_data_parallel(devnet, honest):
    pool, spec, tokens = devnet
    nodes = sim_nodes(WORKERS)
    fp32 = simulate(pool.model_dir, tokens, spec, workers=nodes, rounds=ROUNDS, codec="fp32")
    single = single_node_baseline(pool.model_dir, tokens, spec, workers=nodes, rounds=ROUNDS)
    dp = data_parallel_baseline(pool.model_dir, tokens, spec, workers=nodes, rounds=ROUNDS)
    numbers = (
        f"final eval loss: int8 {honest.final:.4f}, fp32 {fp32.final:.4f}, "
        f"single node {single.final:.4f}, data parallel {dp.final:.4f} (start {honest.eval_losses[0]:.4f})"
    )
    assert len(honest.eval_losses) == ROUNDS + 1, numbers
    assert honest.final < honest.eval_losses[0] - 0.5, numbers  # it learned
    assert dp.tokens_per_round == honest.tokens_per_round == WORKERS * single.tokens_per_round, numbers
    assert honest.final <= single.final, numbers
    assert honest.final <= (1 + DP_MARGIN) * dp.final, numbers
    assert abs(honest.final - fp32.final) <= CODEC_MARGIN * fp32.final, numbers
    assert all(f.bitwise and f.within and f.relative_l2 < 0.02 for f in honest.files), numbers


def test_replay_filtering_undoes_a_scaled_cheater(devnet, honest):
    pool, spec, tokens = devnet
    nodes = sim_nodes(WORKERS + 1)
    cheater = {nodes[-1]: TrainCheat.SCALED}
    run = {"workers": nodes, "rounds": ROUNDS, "cheaters": cheater}
    naive = simulate(pool.model_dir, tokens, spec, **run)
    filtered = simulate(pool.model_dir, tokens, spec, **run, replay_filter=True)
    numbers = f"final eval loss: honest {honest.final:.4f}, naive {naive.final:.4f}, filtered {filtered.final:.4f}"
    assert naive.final > honest.final + 0.1, numbers
    assert filtered.eval_losses == honest.eval_losses, numbers  # exactly the honest curve
    for r in range(ROUNDS):
        assert filtered.included(r) == nodes[:WORKERS] and naive.included(r) == nodes
    cheats = [f for f in filtered.files if f.cheat]
    assert len(cheats) == ROUNDS and all(not f.within and f.relative_l2 > 5 for f in cheats), numbers
    assert all(f.within for f in filtered.files if not f.cheat)

"""The devnet gives each compute process its own share of the machine's cores."""

from __future__ import annotations

import pytest
from proofpool.devnet.services import cpu_shares, thread_environment


def test_more_processes_than_cores_take_one_core_each_round_robin() -> None:
    shares = cpu_shares(["validator", "trainer", "alice", "bob"], [0, 1])
    assert shares == {"validator": (0,), "trainer": (1,), "alice": (0,), "bob": (1,)}


def test_fewer_processes_than_cores_split_them_evenly() -> None:
    assert cpu_shares(["a", "b"], range(8)) == {"a": (0, 1, 2, 3), "b": (4, 5, 6, 7)}
    assert cpu_shares(["a", "b", "c"], [3, 5, 7, 9]) == {"a": (3,), "b": (5,), "c": (7,)}


def test_default_cores_are_the_ones_this_process_may_use() -> None:
    shares = cpu_shares(["only"])
    assert shares["only"] and all(isinstance(c, int) for c in shares["only"])


def test_no_cores_is_an_error() -> None:
    with pytest.raises(ValueError, match="no cores"):
        cpu_shares(["a"], [])


def test_thread_environment_binds_a_workers_engine_to_its_cores() -> None:
    assert thread_environment((2, 3)) == {"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"}
    assert thread_environment((1,), vllm=True) == {
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "VLLM_CPU_OMP_THREADS_BIND": "1",
    }

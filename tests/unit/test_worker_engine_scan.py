"""vLLM can start in a process that already built proofs (numba loaded), as a worker's
checkpoint reload does: vLLM's start-up scan of every module's objects must not trip over
llvmlite's duck-typed library handle."""

from __future__ import annotations

import numpy as np
from proofpool.worker.engine import _shield_llvmlite_from_kernel_scan

from proofpool.core.toploc.field import interpolate


def test_vllm_kernel_scan_passes_after_numba_compiled_the_proof_kernel() -> None:
    from vllm.triton_utils.dispatcher import _rebind_kernels  # the scan an engine start runs

    assert interpolate(np.array([1, 2, 3]), np.array([4, 5, 6])).shape == (3,)  # numba, llvmlite loaded
    _shield_llvmlite_from_kernel_scan()
    _rebind_kernels([])  # raised AttributeError ('_lib_fn_wrapper' has no 'get') without the shield

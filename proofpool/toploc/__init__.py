"""TOPLOC: locality-sensitive proofs of the last hidden states behind a completion.

Workers `build_proofs` from the activations they generated with; validators recompute the
activations in one prefill and `verify_proofs`, then `toploc_verdict` turns the per-chunk
statistics into accept/reject with a reason code. See docs/toploc.md.
"""

from proofpool.toploc.field import PRIME, ToplocError
from proofpool.toploc.proof import (
    DEFAULT_CHUNK_SIZE,
    DEFAULT_TOPK,
    ProofFormatError,
    build_proofs,
    expected_proof_lengths,
    join_proofs,
    split_proofs,
)
from proofpool.toploc.verify import ChunkCheck, toploc_verdict, verify_proof_blob, verify_proofs

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "DEFAULT_TOPK",
    "PRIME",
    "ChunkCheck",
    "ProofFormatError",
    "ToplocError",
    "build_proofs",
    "expected_proof_lengths",
    "join_proofs",
    "split_proofs",
    "toploc_verdict",
    "verify_proof_blob",
    "verify_proofs",
]

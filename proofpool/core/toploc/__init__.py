"""TOPLOC: locality-sensitive proofs of the last hidden states behind a completion.

Workers `build_proofs_batch` from the activations they generated with (all samples of a generation
call at once); validators recompute the activations in one prefill and `verify_proofs_batch` (or
`verify_proof_blobs_batch` on rollout rows), then `toploc_verdict` turns each sample's per-chunk
statistics into accept/reject with a reason code. The single-sample functions are the same code
for one sample. See docs/toploc.md.
"""

from proofpool.core.toploc.field import PRIME, ToplocError
from proofpool.core.toploc.proof import (
    DEFAULT_CHUNK_SIZE,
    DEFAULT_TOPK,
    ProofFormatError,
    build_proofs,
    build_proofs_batch,
    expected_proof_lengths,
    join_proofs,
    split_proofs,
)
from proofpool.core.toploc.verify import (
    ChunkCheck,
    toploc_verdict,
    verify_proof_blob,
    verify_proof_blobs_batch,
    verify_proofs,
    verify_proofs_batch,
)

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "DEFAULT_TOPK",
    "PRIME",
    "ChunkCheck",
    "ProofFormatError",
    "ToplocError",
    "build_proofs",
    "build_proofs_batch",
    "expected_proof_lengths",
    "join_proofs",
    "split_proofs",
    "toploc_verdict",
    "verify_proof_blob",
    "verify_proof_blobs_batch",
    "verify_proofs",
    "verify_proofs_batch",
]

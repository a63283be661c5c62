"""Audits of one submission against the chain, cheap enough for a request.

`verify_submission`: the ledger's rows about it (`ledger_snapshot`) against the rows its chain logs
make through the indexer's projectors (`ledger_replay`), compared by `submission_diff`, and its
status against the contract's. `verdict_evidence`: each verdict (`verdict_targets`) with its evidence
document (`evidence_documents`) against the commitment its transaction carries. `chain_view` reads
the chain for both. Served by `proofpool.backend.api.ledger_checks`; see docs/ledger.md.
"""

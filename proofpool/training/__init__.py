"""Training pools (DiLoCo, as INTELLECT-1 ran it) on the market: the adapter layer over
`proofpool.core.diloco`, with torch, transformers, the object store and the chain.

    dataset.py    the tokenized dataset file (one int32 tensor, named by its sha256)
    inner.py      a member's H inner AdamW steps -> its pseudo-gradient (workers and replaying validators)
    published.py  `diloco://<sha256>` pools: spec, base model and dataset in the object store
    rounds.py     which checkpoint a round starts from, the outer step, the checkpoint it publishes
    updates.py    one accepted pseudo-gradient file fetched from the store and checked
    verify_round.py  a published round recomputed from the chain and the store (`ledger verify-round`)

Nothing is re-exported: importing the package imports neither torch nor transformers.
"""

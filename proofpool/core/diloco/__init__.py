"""DiLoCo training pools (INTELLECT-1's recipe, verified): the pure parts every role shares.

`spec` (what a training pool commits to) and `shard` (which dataset rows a node trains on in a
round) need no torch, so the CLI and the backend read them on a base install; `codec`,
`update_file`, `compare`, `outer` and `stats` work on tensors. Nothing is re-exported here, so
importing the spec never imports torch.
"""

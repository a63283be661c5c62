"""The GRPO trainer: loss, batches, optimizer steps, checkpoint sharding and publication.

Pure PyTorch below `loss.py`, `batch.py` and `step.py`; chain, storage and database access live
in the modules that gather data and publish checkpoints.
"""

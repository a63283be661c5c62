"""RL math shared by worker, validator and trainer."""

from proofpool.core.rl.advantages import group_advantages

__all__ = ["group_advantages"]

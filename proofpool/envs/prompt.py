"""A problem's prompt as token ids, rendered one way for every role: the model's chat template.

Workers build their requests from these ids and validators compare a row's prompt with them
(`prompt_mismatch`), so the rendering must be one function with every input pinned:

- the chat template is the model directory's own (or the pool spec's override), applied to the
  problem's chat turns with a generation prompt;
- `template_kwargs` come from the pool spec: a template that stamps today's date or reads any
  other variable gets the same value on every machine (`date_string` is pinned by default, since
  Llama-3 templates otherwise insert the current date);
- the rendered text is tokenized without adding special tokens: the template already writes the
  BOS it wants, and adding one again would give two;
- completions are never re-tokenized: rollout files carry the ids the engine produced, and text is
  only ever decoded from them (for scoring), never encoded back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from proofpool.core.environment import Message
from proofpool.core.errors import ProofpoolError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

PINNED_TEMPLATE_KWARGS: Final[Mapping[str, Any]] = {"date_string": "01 Jan 2025"}
"""Variables some templates read from the clock, pinned unless the pool spec says otherwise."""


class PromptError(ProofpoolError):
    """A prompt cannot be rendered: no chat template, or the template rejected the turns."""


def render_prompt(
    tokenizer: PreTrainedTokenizerBase,
    messages: Sequence[Message],
    template_kwargs: Mapping[str, Any] | None = None,
    chat_template: str | None = None,
) -> tuple[int, ...]:
    """The prompt ids of `messages` under the model's chat template (or `chat_template`)."""
    if chat_template is None and not getattr(tokenizer, "chat_template", None):
        raise PromptError("the model's tokenizer has no chat template; set one in the pool spec (prompt.chat_template)")
    turns = [{"role": m.role, "content": m.content} for m in messages]
    try:
        text = tokenizer.apply_chat_template(
            turns,
            chat_template=chat_template,
            tokenize=False,
            add_generation_prompt=True,
            **{**PINNED_TEMPLATE_KWARGS, **(template_kwargs or {})},
        )
    except Exception as exc:  # jinja raises its own errors (TemplateError, UndefinedError, ...)
        raise PromptError(f"the chat template failed on the prompt: {exc}") from exc
    if not isinstance(text, str):
        raise PromptError(f"the chat template rendered {type(text).__name__}, not text")
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if not ids:
        raise PromptError("the chat template rendered an empty prompt")
    return tuple(int(i) for i in ids)


def decode_completion(tokenizer: PreTrainedTokenizerBase, completion: Sequence[int], stop_ids: frozenset[int]) -> str:
    """The text a task environment scores: the completion without its final stop token, decoded
    with special tokens dropped (a model that writes `<|im_start|>` mid-answer is scored on the rest)."""
    ids = list(completion)
    if ids and ids[-1] in stop_ids:
        ids = ids[:-1]
    return str(tokenizer.decode(ids, skip_special_tokens=True))

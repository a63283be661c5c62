"""The devnet training pool's offline corpus, tokenizer, model and dataset, built once and cached.

A training pool needs text that ships with every machine (no hub, no network): the source files of
the Python standard library are that, about 12 MB of varied, learnable text. On it we train a small
byte-level BPE tokenizer (`tokenizers`, so any text round-trips), build a tiny Llama from a seed
(fp32, tied embeddings, eager attention: the one code path every role replays), and pack the corpus
into the pool's dataset file with `proofpool.training.dataset`. Everything is a function of the
settings (and of the interpreter's stdlib), so the same settings give the same files byte for byte.

Building takes seconds; every worker, validator, the aggregator, the simulation and the tests want the
same pool, so it lives in a directory named by a hash of its settings under a cache root (the layout of
`proofpool_arithmetic.cache`): built in a temporary sibling, renamed into place when complete (a crash
leaves nothing half-built, and two racing builders end with the same directory), reused when complete.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import sysconfig
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from proofpool.core.spec import canonical_json, sha256_hex

if TYPE_CHECKING:
    import torch
    from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

    from proofpool.core.diloco.spec import DilocoSpec

BUILDER_VERSION: Final = 1
"""Bumped whenever the build changes its output for the same settings (a new cache directory)."""
DEFAULT_CORPUS_BYTES: Final = 2_000_000
MAX_FILE_BYTES: Final = 100_000
"""Larger stdlib files are generated data (pydoc's topics, tables), not code worth learning."""
SKIPPED_DIRS: Final = frozenset({"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"})
EOS_TOKEN: Final = "<|endoftext|>"
"""Id 0: ends every packed text, pads nothing (rows are always full)."""
MANIFEST: Final = "proofpool-diloco-devnet.json"
"""Written last into a built pool directory: its settings and the dataset's digest."""
MODEL_DIR: Final = "model"
DATASET_FILE: Final = "dataset.safetensors"


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_texts(limit_bytes: int = DEFAULT_CORPUS_BYTES) -> list[str]:
    """Source files of the running interpreter's standard library, in sorted path order, up to
    `limit_bytes` of UTF-8 (the file that would cross the limit is left out, so every text is whole).

    Tests, installed packages and files over `MAX_FILE_BYTES` are skipped.
    """
    root = stdlib_root()
    paths = sorted(
        (p for p in root.rglob("*.py") if not SKIPPED_DIRS.intersection(p.relative_to(root).parts[:-1])),
        key=lambda p: p.relative_to(root).as_posix(),
    )
    texts: list[str] = []
    total = 0
    for path in paths:
        try:
            data = path.read_bytes()
        except OSError:
            continue
        if len(data) > MAX_FILE_BYTES:
            continue
        if total + len(data) > limit_bytes:
            break
        try:
            texts.append(data.decode("utf-8"))
        except UnicodeDecodeError:
            continue
        total += len(data)
    return texts


@dataclass(frozen=True)
class DevnetPoolSettings:
    """What fixes a devnet pool: same settings (and corpus), same files."""

    vocab: int = 512
    seq_len: int = 64
    hidden: int = 64
    layers: int = 2
    heads: int = 4
    intermediate: int = 256
    corpus_bytes: int = DEFAULT_CORPUS_BYTES
    seed: int = 0
    name: str = ""
    """The dataset's name for people; empty: `python-stdlib-<major>.<minor>` (or `custom` with texts)."""


@dataclass(frozen=True)
class DevnetDilocoPool:
    """A built devnet pool: a Hugging Face model directory (checkpoint version 0) and a dataset file."""

    root: Path
    model_dir: Path
    dataset_path: Path
    dataset_sha256: str
    sequences: int
    seq_len: int
    vocab_size: int
    settings: DevnetPoolSettings

    def devnet_spec(
        self,
        *,
        steps: int = 8,
        batch_size: int = 8,
        lr: float = 1e-3,
        warmup_steps: int = 2,
        weight_decay: float = 0.0,
        grad_clip: float = 0.0,
        outer_lr: float = 0.7,
        momentum: float = 0.9,
        nesterov: bool = True,
        clip_norm: float = 0.0,
        codec: str = "int8",
        block_size: int = 0,
        deadline_seconds: int = 60,
        min_contributors: int = 2,
        sample_rate: float = 1.0,
        tolerance: float = 0.05,
        eval_sequences: int = 64,
    ) -> DilocoSpec:
        """The pool's `DilocoSpec` with the devnet's defaults (INTELLECT-1's outer step, int8 per
        tensor, every file replayed); the model and dataset URIs are filled when published."""
        from proofpool.core.diloco.spec import (
            CodecSpec,
            DilocoModel,
            DilocoSpec,
            InnerSpec,
            OuterSpec,
            ReplaySpec,
            RoundSpec,
        )
        from proofpool.training.dataset import dataset_spec

        return DilocoSpec(
            model=DilocoModel(architecture="LlamaForCausalLM", vocab_size=self.vocab_size),
            dataset=dataset_spec(self.dataset_path, eval_sequences),
            inner=InnerSpec(
                steps=steps,
                batch_size=batch_size,
                lr=lr,
                warmup_steps=warmup_steps,
                weight_decay=weight_decay,
                grad_clip=grad_clip,
            ),
            outer=OuterSpec(lr=outer_lr, momentum=momentum, nesterov=nesterov, clip_norm=clip_norm),
            codec=CodecSpec(name=codec, block_size=block_size),
            round=RoundSpec(deadline_seconds=deadline_seconds, min_contributors=min_contributors),
            validation=ReplaySpec(sample_rate=sample_rate, tolerance=tolerance),
        )

    def tokens(self) -> torch.Tensor:
        """The dataset's tokens (int32 [sequences, seq_len]), verified against its digest."""
        from proofpool.training.dataset import load_dataset

        return load_dataset(self.dataset_path, self.dataset_sha256)


def settings_digest(settings: DevnetPoolSettings, texts_sha256: str | None) -> str:
    """The cache key: the settings, the builder's version and the corpus (the interpreter's version
    for the stdlib, else the digest of the given texts)."""
    corpus = texts_sha256 or f"stdlib-{'.'.join(map(str, sys.version_info[:3]))}"
    return sha256_hex(canonical_json({"settings": asdict(settings), "builder": BUILDER_VERSION, "corpus": corpus}))


def texts_digest(texts: Sequence[str]) -> str:
    digest = hashlib.sha256()
    for text in texts:
        data = text.encode()
        digest.update(len(data).to_bytes(8, "big") + data)
    return digest.hexdigest()


def build_devnet_pool(
    out_dir: Path,
    *,
    vocab: int = 512,
    seq_len: int = 64,
    hidden: int = 64,
    layers: int = 2,
    heads: int = 4,
    intermediate: int | None = None,
    corpus_bytes: int = DEFAULT_CORPUS_BYTES,
    seed: int = 0,
    name: str = "",
    texts: Sequence[str] | None = None,
) -> DevnetDilocoPool:
    """The devnet pool for these settings under the cache root `out_dir`, built on first use.

    `texts` replaces the stdlib corpus (tests use a small one); `intermediate` defaults to 4 * hidden.
    """
    settings = DevnetPoolSettings(
        vocab=vocab,
        seq_len=seq_len,
        hidden=hidden,
        layers=layers,
        heads=heads,
        intermediate=intermediate or 4 * hidden,
        corpus_bytes=corpus_bytes,
        seed=seed,
        name=name or (f"python-stdlib-{sys.version_info[0]}.{sys.version_info[1]}" if texts is None else "custom"),
    )
    texts_sha256 = None if texts is None else texts_digest(texts)
    target = Path(out_dir) / f"diloco-{settings_digest(settings, texts_sha256)[:16]}"
    built = read_pool(target, settings)
    if built is not None:
        return built
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists():  # leftovers of an interrupted or older build
        shutil.rmtree(target)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        _build(staging, settings, stdlib_texts(corpus_bytes) if texts is None else list(texts))
        try:
            staging.rename(target)
        except OSError:
            if read_pool(target, settings) is None:  # not a lost race: a real failure
                raise
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    pool = read_pool(target, settings)
    if pool is None:
        raise RuntimeError(f"the devnet pool built in {target} is incomplete")
    return pool


def read_pool(root: Path, settings: DevnetPoolSettings) -> DevnetDilocoPool | None:
    """The pool built in `root` with `settings`, or None if there is none (or it is incomplete)."""
    try:
        manifest = json.loads((root / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict) or manifest.get("settings") != asdict(settings):
        return None
    model_dir, dataset_path = root / MODEL_DIR, root / DATASET_FILE
    if not (model_dir / "model.safetensors").is_file() or not dataset_path.is_file():
        return None
    return DevnetDilocoPool(
        root=root,
        model_dir=model_dir,
        dataset_path=dataset_path,
        dataset_sha256=manifest["dataset_sha256"],
        sequences=manifest["sequences"],
        seq_len=settings.seq_len,
        vocab_size=manifest["vocab_size"],
        settings=settings,
    )


def train_tokenizer(texts: Sequence[str], vocab: int) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer of `vocab` ids trained on `texts`, `EOS_TOKEN` first."""
    from proofpool.devnet.tiny_model import byte_level_bpe
    from transformers import PreTrainedTokenizerFast

    raw = byte_level_bpe(texts, vocab, [EOS_TOKEN])
    return PreTrainedTokenizerFast(tokenizer_object=raw, eos_token=EOS_TOKEN, pad_token=EOS_TOKEN)


def build_model(settings: DevnetPoolSettings, vocab_size: int, eos_id: int) -> LlamaForCausalLM:
    """The tiny Llama, initialized from `settings.seed` (fp32, tied embeddings, eager attention)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=settings.hidden,
        intermediate_size=settings.intermediate,
        num_hidden_layers=settings.layers,
        num_attention_heads=settings.heads,
        num_key_value_heads=settings.heads,
        max_position_embeddings=settings.seq_len,
        tie_word_embeddings=True,
        attention_dropout=0.0,
        bos_token_id=None,
        eos_token_id=eos_id,
        pad_token_id=eos_id,
        attn_implementation="eager",
    )
    torch.manual_seed(settings.seed)
    return LlamaForCausalLM(config).to(torch.float32)


def _build(root: Path, settings: DevnetPoolSettings, texts: Sequence[str]) -> None:
    from proofpool.training.dataset import pack_texts, write_dataset

    if not texts:
        raise ValueError("the devnet corpus is empty")
    tokenizer = train_tokenizer(texts, settings.vocab)
    model_dir = root / MODEL_DIR
    tokenizer.save_pretrained(model_dir)
    eos_id = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
    build_model(settings, len(tokenizer), eos_id).save_pretrained(model_dir)
    tokens = pack_texts(texts, tokenizer, settings.seq_len)
    sha256 = write_dataset(tokens, root / DATASET_FILE, name=settings.name)
    manifest = {
        "settings": asdict(settings),
        "builder": BUILDER_VERSION,
        "dataset_sha256": sha256,
        "sequences": int(tokens.shape[0]),
        "vocab_size": len(tokenizer),
        "corpus_texts": len(texts),
        "corpus_bytes": sum(len(t.encode()) for t in texts),
    }
    (root / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")

"""Peers written as their users write them, for the text study and benchmark.

sentence-transformers' static embedding model from scratch: a WordPiece tokenizer trained
on the training texts, ``StaticEmbedding`` over it, ``MultipleNegativesRankingLoss``
(in-batch negatives, both directions off: the anchor's row only, as its users train
pairs) and the ``SentenceTransformerTrainer`` with no-duplicates batches, the recipe of
its "static embedding" models (Aarsen 2025, https://huggingface.co/blog/static-embeddings:
learning rate 0.2, warm-up 10%).
"""

from __future__ import annotations

import os
import tempfile
import time
from typing import Any

import numpy as np


def _modules() -> Any:
    try:
        from sentence_transformers.sentence_transformer import modules
    except ImportError:  # sentence-transformers < 6
        from sentence_transformers import models as modules
    return modules


def static_embedding_fit(pairs: np.ndarray, *, batch_size: int = 64, epochs: int = 5,
                         dim: int = 256, vocab_size: int = 30_000, seed: int = 0,
                         lr: float = 0.2) -> tuple[Any, float, float]:
    """Train the peer on ``pairs`` (anchor, positive), or rows (anchor, positive,
    negative) whose third column MultipleNegativesRankingLoss takes as each anchor's hard
    negative; returns the model, the seconds of ``trainer.train()`` and the seconds of
    the whole fit (tokenizer training, model and trainer set-up included)."""
    import torch
    from datasets import Dataset
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
        losses,
    )
    from sentence_transformers.training_args import BatchSamplers
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    start = time.perf_counter()
    raw = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    raw.normalizer = normalizers.BertNormalizer(lowercase=True)
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    raw.train_from_iterator(list(pairs.reshape(-1)), trainers.WordPieceTrainer(
        vocab_size=vocab_size, special_tokens=["[PAD]", "[UNK]"]))
    torch.manual_seed(seed)
    model = SentenceTransformer(
        modules=[_modules().StaticEmbedding(raw, embedding_dim=dim)], device="cpu")
    names = ("anchor", "positive", "negative")[:pairs.shape[1]]
    data = Dataset.from_dict({name: list(pairs[:, i]) for i, name in enumerate(names)})
    import transformers

    # 10% warm-up: a float warmup_steps from transformers 5 on, warmup_ratio before
    warmup = {"warmup_steps": 0.1} if int(transformers.__version__.split(".")[0]) >= 5 \
        else {"warmup_ratio": 0.1}
    with tempfile.TemporaryDirectory() as out:
        args = SentenceTransformerTrainingArguments(
            output_dir=out, num_train_epochs=epochs, per_device_train_batch_size=batch_size,
            learning_rate=lr, batch_sampler=BatchSamplers.NO_DUPLICATES, **warmup,
            seed=seed, data_seed=seed, save_strategy="no", logging_strategy="no",
            report_to=[], use_cpu=True, dataloader_num_workers=0,
            disable_tqdm=True)
        trainer = SentenceTransformerTrainer(
            model=model, args=args, train_dataset=data,
            loss=losses.MultipleNegativesRankingLoss(model))
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        train_start = time.perf_counter()
        trainer.train()
        end = time.perf_counter()
    return model, end - train_start, end - start


def static_embedding_encode(model: Any, texts: list[str]) -> np.ndarray:
    """Unit embeddings of ``texts`` by the peer."""
    out = model.encode(list(texts), batch_size=1024, convert_to_numpy=True,
                       show_progress_bar=False)
    return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)

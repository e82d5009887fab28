"""Fit small estimators data-parallel on the processes of a torchrun launch.

    python -m torch.distributed.run --standalone --nproc_per_node=2 \
        tests/scripts/distributed_fit.py OUT.pt

Every case of CASES is fitted with an ``accelerate.Accelerator`` (gloo on the CPU); the
checkpoint case trains one epoch with AcceleratorCheckpoint, then resumes for a second
in a fresh estimator. Process 0 saves the weights and per-batch losses;
tests/test_distributed.py compares them with single-process fits on the same global
batches (``fit(case)`` below, without an accelerator). The same launch checks that a
``SelectorSampler`` on each process iterates slices of the global batches
(``sampler_slices``, for tests/test_sampler.py), and trains with sentence-transformers'
trainer on batches of skcontrast's sampler (``sentence_transformers_trainer``, for
tests/test_sentence_transformers.py): one launch, one set of imports (a launch of its own
for the trainer cost about 15 CPU-seconds more).
"""

import functools
import sys
import tempfile
import traceback
from pathlib import Path

import numpy as np
import torch
from sklearn.base import clone

from skcontrast import AcceleratorCheckpoint, ContrastiveEmbedder, Stream, SupConEmbedder
from skcontrast.datasets import make_paired_gaussians
from skcontrast.losses import DCL, SymmetricInfoNCE
from skcontrast.memory import CrossBatchMemory, SogCLRMemory
from skcontrast.selectors import (
    JESTSelector,
    OSGDSelector,
    RhoLossSelector,
    ShuffledBatchSelector,
    SpectralBatchSelector,
)

CASES = {
    "shuffled": {"selector": lambda: ShuffledBatchSelector(16)},
    "osgd, learned temperature": {"selector": lambda: OSGDSelector(16, k=3, q=2),
                                  "loss": SymmetricInfoNCE(learn_temperature=True)},
    "supcon, spectral": {"selector": lambda: SpectralBatchSelector(16, chunk_size=64),
                         "supervised": True},
    "sogclr, learned temperature": {"selector": lambda: ShuffledBatchSelector(16),
                                    "loss": DCL(learn_temperature=True),
                                    "memory": SogCLRMemory(gamma=0.8)},
    "xbm, supcon": {"selector": lambda: ShuffledBatchSelector(16), "supervised": True,
                    "memory": CrossBatchMemory(size=40)},
    "micro-batches, sogclr": {"selector": lambda: ShuffledBatchSelector(16), "loss": "dcl",
                              "memory": SogCLRMemory(gamma=0.8), "micro_batch_size": 3},
    "jest, reference model": {"selector": lambda: JESTSelector(
        16, 0.5, n_chunks=2, reference=reference_model(), random_state=0), "loss": "siglip"},
    "rho, cached, supcon": {"selector": lambda: RhoLossSelector(
        16, 0.5, reference=reference_model(), selection_pass="cached", random_state=0),
        "supervised": True},
    "text, sparse updates": {"selector": lambda: ShuffledBatchSelector(16), "text": True},
    "stream, spectral": {"selector": lambda: SpectralBatchSelector(16, chunk_size=64),
                         "stream": True},
}

WORDS = ["red", "blue", "green", "cat", "dog", "sun", "moon", "star", "tree", "car",
         "heart", "face", "hand", "fire", "snow"]


def text_pairs(n=90):
    """``n`` (name, variant) pairs of two-word names, the same in every process."""
    names = [f"{a} {b}" for a in WORDS for b in WORDS if a != b][:n]
    return [(name, name.upper() + "!") for name in names]


@functools.cache
def reference_model():
    """A small reference, fitted the same way in every process (one process each)."""
    X, _ = make_paired_gaussians(90, 6, n_clusters=3, random_state=1)
    return ContrastiveEmbedder(n_components=3, hidden_layer_sizes=(8,), max_epochs=1,
                               random_state=1, device="cpu").fit(X)


def fit(case: str, accelerator=None, max_epochs: int = 2, callbacks=None, plain=False):
    """``plain``: without gradient caching (the update it must equal)."""
    settings = dict(CASES[case])
    if plain:
        settings.pop("micro_batch_size", None)
    if "memory" in settings:
        settings["memory"] = clone(settings["memory"])
    kind = SupConEmbedder if settings.pop("supervised", False) else ContrastiveEmbedder
    text = settings.pop("text", False)
    stream = settings.pop("stream", False)
    selector = settings.pop("selector")()
    est = kind(n_components=4, hidden_layer_sizes=(16,), max_epochs=max_epochs, lr=1e-2,
               selector=selector, random_state=0, device="cpu", accelerator=accelerator,
               callbacks=callbacks, **settings)
    X, y = make_paired_gaussians(90, 6, n_clusters=3, random_state=0)
    if text:  # the default text bag, sparse gradients, LazyAdam
        return est.fit(text_pairs())
    if stream:  # each process reads every other row; one window holds them all
        if plain:  # the window the processes gather: process 0's rows, then process 1's
            return est.fit(np.concatenate([X[0::2], X[1::2]]))
        return est.fit(Stream(lambda: iter(X), window=6))
    return est.fit(X[:, 0], y) if kind is SupConEmbedder else est.fit(X)


def summary(est) -> dict:
    memory = est.net_.memory_state
    return {"weights": {k: v.detach().cpu().clone()
                        for k, v in est.net_.module_.state_dict().items()},
            "memory": {} if memory is None else {
                k: v.detach().cpu().clone() if isinstance(v, torch.Tensor) else v
                for k, v in memory.state_dict().items()},
            "temperature": est.temperature_,
            "losses": [b["train_loss"] for epoch in est.history_ for b in epoch["batches"]],
            "kept": [b.get("kept") for epoch in est.history_ for b in epoch["batches"]],
            "n_batches": list(est.history_[:, "n_batches"]),
            "sparse": [m.sparse for m in est.net_.module_.modules()
                       if isinstance(m, torch.nn.EmbeddingBag)]}


def sampler_slices() -> bool:
    """Whether the processes' ``SelectorSampler`` slices, gathered, are the global
    batches of one process's sampler, for two epochs of spectral batches of 16, each
    process holding 8 rows of each."""
    import torch.distributed as dist

    from skcontrast.selectors import SelectorSampler

    X, _ = make_paired_gaussians(64, 6, random_state=0)

    def embed(idx):  # the same embeddings on every process
        return X[idx]

    sampler = SelectorSampler(SpectralBatchSelector(16, random_state=0), 64, embed=embed)
    epochs = []
    for epoch in range(2):
        sampler.set_epoch(epoch)
        local = list(sampler)
        gathered = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, local)
        epochs.append([[i for g in gathered for i in g[k]] for k in range(len(local))])
    whole = SelectorSampler(SpectralBatchSelector(16, random_state=0), 64, embed=embed)
    expected = []
    for epoch in range(2):
        whole.set_epoch(epoch)
        expected.append([b.tolist() for b in whole.epoch_batches()])  # the global batches
    return epochs == expected and all(len(part) == 8 for part in local)


def sentence_transformers_trainer(folder: str) -> tuple[list, list] | None:
    """Train a one-layer BERT with sentence-transformers' trainer on both processes, its
    batches drawn by skcontrast's ``batch_sampler`` (spectral batches of 4, no two rows of
    a label together); for tests/test_sentence_transformers.py: the rows and, per
    process, the batches the sampler drew and those the process trained on, the steps
    and the sampler's refreshes. ``None`` without sentence-transformers and datasets."""
    import importlib.util

    if any(importlib.util.find_spec(m) is None for m in ("sentence_transformers", "datasets")):
        return None
    import torch.distributed as dist
    from datasets import Dataset
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )

    from skcontrast.integrations.sentence_transformers import SkcontrastLoss, batch_sampler
    from skcontrast.losses import FalseNegativeGuard
    from skcontrast.selectors import TemperedSelector

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for _helpers
    from _helpers import recording_sampler, tiny_bert

    words = ["red", "green", "blue", "dog", "cat", "man", "woman", "flag", "sun", "moon",
             "star", "tree", "leaf", "rock", "sea", "sky"]
    rows = [(f"{w} one", f"{w} two", i % 6) for i, w in enumerate(words)]
    if dist.get_rank() == 0:
        tiny_bert(f"{folder}/bert", [t for r in rows for t in r[:2]]).save(f"{folder}/model")
    dist.barrier()
    model = SentenceTransformer(f"{folder}/model", device="cpu")
    data = Dataset.from_dict({"anchor": [r[0] for r in rows],
                              "positive": [r[1] for r in rows],
                              "label": [r[2] for r in rows]})
    made, drawn, trained = [], [], []
    factory = batch_sampler(TemperedSelector(SpectralBatchSelector(4), max_same_label=0),
                            model=model)

    class Recorder:  # records the batches this process trains on
        def __init__(self, collator):
            self.collator = collator

        def __getattr__(self, name):
            return getattr(self.collator, name)

        def __call__(self, features):
            trained.append([f["anchor"] for f in features])
            return self.collator(features)

    args = SentenceTransformerTrainingArguments(
        output_dir=f"{folder}/out", num_train_epochs=3, per_device_train_batch_size=4,
        learning_rate=1e-3, use_cpu=True, report_to=[], save_strategy="no",
        logging_strategy="no", disable_tqdm=True,
        batch_sampler=recording_sampler(factory, made, drawn), seed=3)
    loss = SkcontrastLoss(model, SymmetricInfoNCE(false_negatives=FalseNegativeGuard()))
    trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=data, loss=loss)
    trainer.data_collator = Recorder(trainer.data_collator)
    state = trainer.train()
    mine = {"world": dist.get_world_size(), "drawn": drawn, "trained": trained,
            "steps": state.global_step, "refreshes": made[-1].refreshes}
    ranks = [None] * dist.get_world_size()
    dist.all_gather_object(ranks, mine)
    return rows, ranks


if __name__ == "__main__":
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    results = {case: summary(fit(case, accelerator)) for case in CASES}
    results["sampler slices"] = sampler_slices()
    with tempfile.TemporaryDirectory() as scratch:
        # the same directory on every process (one machine here)
        box = [scratch]
        torch.distributed.broadcast_object_list(box, src=0)
        fit("shuffled", accelerator, 1, [AcceleratorCheckpoint(box[0])])
        resumed = fit("shuffled", accelerator, 1, [AcceleratorCheckpoint(box[0], resume=True)])
        results["resumed"] = summary(resumed)
        memory_case = "sogclr, learned temperature"
        fit(memory_case, accelerator, 1, [AcceleratorCheckpoint(box[0] + "-memory")])
        resumed = fit(memory_case, accelerator, 1,
                      [AcceleratorCheckpoint(box[0] + "-memory", resume=True)])
        results["resumed with memory"] = summary(resumed)
        try:  # a failure here fails the trainer's test alone, not the launch
            results["sentence-transformers trainer"] = sentence_transformers_trainer(
                str(Path(box[0]) / "sentence-transformers"))
        except Exception:
            results["sentence-transformers trainer"] = {"error": traceback.format_exc()}
        accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        torch.save({"world": accelerator.num_processes, "results": results}, sys.argv[1])

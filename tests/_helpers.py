"""Small models, data and parameter sets that several test modules use at module level
(in parametrize lists, as classes handed to an estimator): imported, not fixtures.

Each helper returns a new object per call, so a module that changes what it got changes
nothing in another module."""

import re
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import Dataset

from skcontrast.datasets import make_paired_embeddings, make_paired_gaussians
from skcontrast.selectors import BatchSelector
from skcontrast.text import HashingNgramTokenizer

#: A small, quick image-model fit: 4 components, 2 epochs of batches of 16.
SMALL_IMAGES = {"n_components": 4, "max_epochs": 2, "batch_size": 16, "random_state": 0}


CUDA = torch.cuda.is_available()
requires_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU; none is usable here")


class RecordingSelector(BatchSelector):
    """Delegates to another selector and keeps, per epoch, the shape of what it was shown
    (``shapes_``), the loss it was handed to score with (``losses_``) and the batches it
    chose (``seen_``)."""

    def __init__(self, inner=None):
        self.inner = inner

    @property
    def needs_embeddings(self):
        return self.inner.needs_embeddings

    @property
    def current_epoch(self):
        return self.inner.current_epoch

    def set_epoch(self, epoch):
        self.inner.set_epoch(epoch)
        return self

    def epoch_batches(self, X, y=None, groups=None, *, loss=None):
        batches = self.inner.epoch_batches(X, y, groups, loss=loss)
        self.losses_ = [*getattr(self, "losses_", []), loss]
        self.shapes_ = [*getattr(self, "shapes_", []), np.shape(X)]
        self.seen_ = [*getattr(self, "seen_", []), [b.tolist() for b in batches]]
        return batches

    def _n_batches(self, n, y):
        return self.inner.get_n_splits(n, y)


def random_data(n=192, d=8, seed=0):
    """Random pairs ``(n, 2, d)`` and labels of 6 classes: data with no structure."""
    X = np.random.default_rng(seed).normal(size=(n, 2, d)).astype(np.float32)
    return X, np.random.default_rng(seed + 1).integers(6, size=n)


def clustered_data(n=192, d=8, seed=0):
    """Pairs in 6 clusters and their cluster labels: data with structure to find."""
    return make_paired_embeddings(n, d, n_groups=6, noise=0.5, random_state=seed)


def brute_top(X, m):
    """Each row's m nearest other rows by cosine similarity, in float64 with a full sort."""
    u = X[:, 0].astype(np.float64)
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    sims = u @ u.T
    np.fill_diagonal(sims, -np.inf)
    return np.argsort(-sims, axis=1, kind="stable")[:, :m]


#: A small, reproducible fit of the default text model (a 2^12-id bag).
TEXT_FIT = {"max_epochs": 2, "batch_size": 8, "random_state": 0, "device": "cpu",
            "tokenizer": HashingNgramTokenizer(n_features=2**12)}


def small_mlp(**params):
    """A small, reproducible fit of the default MLP on the CPU (4 components, one hidden
    layer of 16, 2 epochs at lr 1e-2), ``params`` changed or added: a new dict each call."""
    return {"n_components": 4, "hidden_layer_sizes": (16,), "max_epochs": 2, "lr": 1e-2,
            "random_state": 0, "device": "cpu", **params}


def paired_gaussians(n, d=8, n_clusters=3):
    """A module-scoped fixture of ``make_paired_gaussians(n, d, n_clusters=n_clusters,
    random_state=0)``, named by the name it is assigned to in the test module."""

    def pairs():
        return make_paired_gaussians(n, d, n_clusters=n_clusters, random_state=0)

    return pytest.fixture(scope="module")(pairs)


def tiny_cnn(n_out=4):
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2),
                         nn.Flatten(), nn.Linear(16, n_out))


def image_pairs(images, shift=1):
    """Two views of each image: the image and a shifted copy, (n, 2, 1, 8, 8)."""
    return np.stack([images, np.roll(images, shift, axis=-1)], axis=1)


class Bag(nn.Module):
    """Text encoder for token ids: a bag of embeddings."""

    def __init__(self, vocab=20, n_out=4):
        super().__init__()
        self.bag = nn.EmbeddingBag(vocab, n_out)

    def forward(self, tokens):
        return self.bag(tokens)


class Encoder(nn.Module):
    """A class that takes the sizes the estimator knows, and a width of its own."""

    def __init__(self, n_in, n_out, hidden=16):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(n_in, hidden), nn.BatchNorm1d(hidden), nn.ReLU())
        self.out = nn.Linear(hidden, n_out)

    def forward(self, x):
        return self.out(self.body(x))


class PairDataset(Dataset):
    """PyTorch's "two crops" pattern: item i is (x0, x1)."""

    def __init__(self, images, views=2):
        self.images = torch.as_tensor(images)
        self.views = views

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        x = self.images[i]
        return (x, x.roll(1, dims=-1)) if self.views == 2 else x


PEAK = """
import json, sys, torch
from skcontrast import losses
sys.path.insert(0, sys.argv[5])
from _harness import peak_memory_mib

def step(b, chunk):
    g = torch.Generator().manual_seed(0)
    u = torch.randn(b, 16, generator=g, requires_grad=True)
    v = torch.randn(b, 16, generator=g, requires_grad=True)
    scalars = {k: torch.tensor(x, requires_grad=True) for k, x in json.loads(sys.argv[4]).items()}
    getattr(losses, sys.argv[1])(u, v, chunk_size=chunk, **scalars).backward()
    assert torch.isfinite(u.grad).all() and torch.isfinite(v.grad).all()
    assert all(torch.isfinite(x.grad) for x in scalars.values())

step(64, 16), step(64, None)  # allocator and kernels warmed up
b, chunk = int(sys.argv[2]), int(sys.argv[3])
growth = [peak_memory_mib(lambda size=size: step(b, size)) for size in (chunk, None)]
assert None not in growth, "no peak resident memory to read here (Linux's VmHWM)"
print(json.dumps([mib * 2**20 for mib in growth]))
"""


def peak_memory_growth(loss, b, chunk, **scalars):
    """The peak resident memory (bytes) a forward and backward of ``loss`` (a function of
    :mod:`skcontrast.losses`) added on ``(b, 16)`` views, tiled in ``chunk``-row tiles and
    dense, in a fresh process, measured as the benchmarks measure it
    (``benchmarks/_harness.peak_memory_mib``: Linux's peak, ``VmHWM``, reset before each
    call); ``scalars`` are learned 0-d parameters (temperature, bias), which get gradients
    too. Every allocation above 64 KiB is its own mapping, returned when freed (glibc's
    ``MALLOC_MMAP_THRESHOLD_``), so the peak is what the loss held at once, not what the
    allocator kept."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    benchmarks = str(Path(__file__).resolve().parents[1] / "benchmarks")
    done = subprocess.run(
        [sys.executable, "-c", PEAK, loss, str(b), str(chunk), json.dumps(scalars),
         benchmarks], capture_output=True, text=True, timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1", "MALLOC_MMAP_THRESHOLD_": "65536"})
    assert done.returncode == 0, done.stderr[-2000:]
    tiled, dense = json.loads(done.stdout.strip().splitlines()[-1])
    return tiled, dense


def peak_anonymous_memory(run):
    """The peak anonymous memory (bytes) of this process while ``run()`` runs, above
    where it started, and what ``run`` returned: ``benchmarks/_harness.peak_anonymous``,
    as ``bench_scale.py`` measures it (Linux's ``RssAnon``, sampled every 5 ms)."""
    import importlib.util
    from pathlib import Path

    import pytest

    if not Path("/proc/self/status").exists():
        pytest.skip("needs Linux's /proc to read the process's anonymous memory")
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "_harness.py"
    spec = importlib.util.spec_from_file_location("_bench_harness", path)
    harness = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(harness)
    mib, _, result = harness.peak_anonymous(run)
    return mib * 2**20, result


# --------------------------------------------------------------------------------------
# sentence-transformers models built here (no download), for its tests and the
# data-parallel trainer run of tests/scripts/distributed_fit.py
# --------------------------------------------------------------------------------------

def sentence_transformer_modules():
    """sentence-transformers' module classes (Transformer, Pooling, StaticEmbedding...)."""
    try:
        from sentence_transformers.sentence_transformer import modules
    except ImportError:  # sentence-transformers < 6
        from sentence_transformers import models as modules
    return modules


def tiny_bert(folder, texts):
    """A SentenceTransformer of a one-layer BERT and a WordPiece tokenizer trained on
    ``texts`` (no download)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

    raw = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    raw.train_from_iterator(texts, trainers.WordPieceTrainer(
        vocab_size=150, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]))
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, pad_token="[PAD]", unk_token="[UNK]",
                                  cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]")
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(tok), hidden_size=16, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=32,
                        max_position_embeddings=32)
    BertModel(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    modules = sentence_transformer_modules()
    transformer = modules.Transformer(str(folder), max_seq_length=16)
    width = getattr(transformer, "get_embedding_dimension", None) or \
        transformer.get_word_embedding_dimension
    pooling = modules.Pooling(width(), "mean")
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(modules=[transformer, pooling], device="cpu")


def recording_sampler(factory, made, drawn):
    """A ``batch_sampler`` callable for sentence-transformers' training arguments: it
    builds each sampler with ``factory`` (skcontrast's ``batch_sampler(...)``), appends it
    to ``made``, and appends every batch the trainer's loader draws from it to ``drawn``
    (as lists of ints)."""

    def sampler(dataset, **kwargs):
        made.append(factory(dataset, **kwargs))

        class Recording(type(made[-1])):
            def __iter__(self):
                for batch in super().__iter__():
                    drawn.append([int(i) for i in batch])
                    yield batch

        made[-1].__class__ = Recording
        return made[-1]

    return sampler


# --------------------------------------------------------------------------------------
# What users read and run: the user guide's code blocks, the examples' quick runs and the
# docs build (tests/test_docs.py, tests/test_examples.py)
# --------------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]
_BLOCK = re.compile(r"^( *)\.\. code-block:: python\n\n((?:\1   .*\n|\n)+)", re.MULTILINE)
_SKIP = re.compile(r"\.\. not-run: .*\n\n$")  # an RST comment right before a block
# ``.. continues: <page>-<n>`` right before a block: it runs after that block's code
_CONTINUES = re.compile(r"\.\. continues: (\S+)\n\n$")


def code_blocks() -> dict[str, str]:
    """The user guide's Python code blocks by ``<page>-<n>``, each with the code of the
    block it continues, if any, before its own."""
    blocks = {}
    for page in sorted((ROOT / "docs").glob("*.rst")):
        text = page.read_text()
        for number, match in enumerate(_BLOCK.finditer(text), start=1):
            if _SKIP.search(text[:match.start()]):
                continue
            indent = len(match.group(1)) + 3
            code = "\n".join(line[indent:] for line in match.group(2).splitlines())
            after = _CONTINUES.search(text[:match.start()])
            if after:
                code = blocks[after.group(1)] + "\n" + code
            blocks[f"{page.stem}-{number}"] = code
    return blocks


#: The example scripts users run (``examples/*.py``).
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))

#: The page of the built docs whose text the docs build returns (its links are checked).
BUILT_PAGE = "selectors.html"

# One process runs the guide's blocks, then the examples, then the docs build: each is
# what users run, and one process imports Python, torch, scikit-learn, the package,
# kornia and transformers once for all three (three processes imported them three times,
# about 7 CPU-s each). Each block runs in a fresh namespace (so a block that uses a name
# another block defined fails), in its own empty working directory, with warnings
# ignored; each example in its quick mode, from the repository, its output captured;
# the build as ``python -m sphinx`` would. After each block or script, what it left
# alive (the modules it imported) leaves the garbage collector's sight, as conftest does
# after collection.
_USER_FACING = """
import contextlib, gc, io, json, os, runpy, sys, tempfile, traceback, warnings
import matplotlib
matplotlib.use("Agg")
job = json.load(sys.stdin)
results = {"blocks": {}, "examples": {}, "docs": None}
home = os.getcwd()
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    for name, code in job["blocks"].items():
        os.chdir(tempfile.mkdtemp())
        try:
            exec(compile(code, name, "exec"), {"__name__": "__main__"})
            results["blocks"][name] = ""
        except BaseException:
            results["blocks"][name] = traceback.format_exc()
        gc.collect()
        gc.freeze()
os.chdir(home)
for name, path in job["examples"].items():
    sys.argv = [path, "--quick", "--out", os.path.join(job["out"], name)]
    printed, error = io.StringIO(), ""
    with warnings.catch_warnings():
        try:
            with contextlib.redirect_stdout(printed):
                runpy.run_path(path, run_name="__main__")
        except SystemExit as exit:
            if exit.code not in (None, 0):
                error = f"exit status {exit.code}"
        except BaseException:
            error = traceback.format_exc()
    results["examples"][name] = {"stdout": printed.getvalue(), "error": error}
    gc.collect()
    gc.freeze()
if job["docs"]:
    from sphinx.cmd.build import build_main
    html, printed = os.path.join(job["out"], "html"), io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
        status = build_main(["-n", "-W", "--keep-going", "-q", "-b", "html", job["docs"], html])
    page = os.path.join(html, job["page"])
    results["docs"] = {"status": status, "output": printed.getvalue(),
                       "page": open(page).read() if os.path.exists(page) else ""}
print(json.dumps(results))
"""


def docs_build_available() -> bool:
    """Whether the docs build's packages (the ``docs`` extra: sphinx, numpydoc) are here."""
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in ("sphinx", "numpydoc"))


def run_user_facing() -> dict:
    """The guide's blocks (``"blocks"``: each one's traceback, ``""`` when it ran), the
    examples in their quick mode (``"examples"``: each one's printed output and error) and
    the docs build, nitpicky and with warnings as errors (``"docs"``: its exit status,
    what it printed and the text of :data:`BUILT_PAGE`; ``None`` without the ``docs``
    extra), from one subprocess of one thread. Under pytest-xdist it runs once
    (conftest's ``run_once``), on the worker that first asks, while the other worker goes
    on with other tests."""
    import json
    import os
    import subprocess
    import sys
    import tempfile

    with tempfile.TemporaryDirectory(prefix="skcontrast-user-facing-") as out:
        job = {"blocks": code_blocks(), "examples": {s.name: str(s) for s in EXAMPLES},
               "out": out, "page": BUILT_PAGE,
               "docs": str(ROOT / "docs") if docs_build_available() else None}
        done = subprocess.run(
            [sys.executable, "-c", _USER_FACING], input=json.dumps(job), capture_output=True,
            text=True, cwd=ROOT, timeout=2400,
            env={**os.environ, "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1",
                 "MKL_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])

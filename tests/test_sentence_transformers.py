"""skcontrast selectors and losses inside sentence-transformers training, with a BERT built
from a small config and a tokenizer trained here (no download)."""

import importlib.util

import numpy as np
import pytest
import torch
from _helpers import recording_sampler, sentence_transformer_modules, tiny_bert

from skcontrast.integrations.sentence_transformers import SkcontrastLoss, batch_sampler
from skcontrast.losses import (
    FalseNegativeGuard,
    InfoNCE,
    SymmetricInfoNCE,
    info_nce,
    symmetric_info_nce,
)
from skcontrast.selectors import SpectralBatchSelector, TemperedSelector

# sentence-transformers is imported by the tests that use it, not when the suite is
# collected: its import (transformers') takes seconds in every pytest-xdist worker
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("sentence_transformers") is None
    or importlib.util.find_spec("datasets") is None,
    reason="needs sentence-transformers and datasets (the 'test' extra)")

ROWS = [("thumbs up", "daumen hoch", "daumen runter", 0),
        ("red heart", "rotes herz", "blaues herz", 1),
        ("dog face", "hundegesicht", "katzengesicht", 2),
        ("cat face", "katzengesicht", "hundegesicht", 3),
        ("man running", "laufender mann", "laufende frau", 4),
        ("woman running", "laufende frau", "laufender mann", 5),
        ("flag germany", "flagge deutschland", "flagge frankreich", 6),
        ("flag france", "flagge frankreich", "flagge deutschland", 7),
        ("red heart", "rotes herz", "grünes herz", 1),
        ("thumbs down", "daumen runter", "daumen hoch", 8),
        ("blue heart", "blaues herz", "rotes herz", 9),
        ("green heart", "grünes herz", "blaues herz", 10)]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return tiny_bert(tmp_path_factory.mktemp("bert"), [t for row in ROWS for t in row[:3]])


def _features(model, rows, columns=3):
    return [model.tokenize([row[c] for row in rows]) for c in range(columns)]


def test_a_loss_with_negative_columns_equals_multiple_negatives_ranking(model):
    from sentence_transformers.sentence_transformer.losses import (
        MultipleNegativesRankingLoss,
    )

    model.eval()
    features = _features(model, ROWS[:6])
    ours = SkcontrastLoss(model, InfoNCE(temperature=0.05))(features, None)
    theirs = MultipleNegativesRankingLoss(model, scale=20.0)(features, None)
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
    # and the skcontrast loss computed directly on the same embeddings
    z = [model(f)["sentence_embedding"] for f in features]
    direct = symmetric_info_nce(z[0], z[1], temperature=0.1,
                                hard_negatives=torch.stack(z[2:], 1))
    torch.testing.assert_close(SkcontrastLoss(model, SymmetricInfoNCE())(features), direct)


@pytest.mark.parametrize("loss", [InfoNCE, SymmetricInfoNCE])
def test_the_tiled_path_equals_the_dense_one_with_negatives_and_the_guard(model, loss):
    model.eval()
    features = _features(model, ROWS[:9])
    labels = torch.tensor([r[3] for r in ROWS[:9]])
    guard = FalseNegativeGuard(same_content=True, same_group=True)
    values, grads = [], []
    for chunk_size in (None, 2):
        model.zero_grad()
        value = SkcontrastLoss(model, loss(0.1, chunk_size=chunk_size,
                                           false_negatives=guard))(features, labels)
        value.backward()
        values.append(value.detach())
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()
                                if p.grad is not None]))
    model.zero_grad()
    torch.testing.assert_close(values[1], values[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-4, atol=1e-6)


def test_the_guard_leaves_duplicate_texts_and_groups_out(model):
    model.eval()
    rows = ROWS[:9]  # rows 1 and 8 are the same pair; rows 2/3 swap their texts
    features = _features(model, rows)
    labels = torch.tensor([r[3] for r in rows])
    loss = SkcontrastLoss(model, InfoNCE(0.1, false_negatives=FalseNegativeGuard(
        same_content=True, same_group=True)))
    got = loss(features, labels)
    z = [model(f)["sentence_embedding"] for f in features]
    texts = np.array([r[:3] for r in rows], dtype=object)
    exclude = torch.tensor([[i != j and (bool({texts[i, 0], texts[i, 1]} &
                                              {texts[j, 0], texts[j, 1]})
                                         or rows[i][3] == rows[j][3]) for j in range(9)]
                            for i in range(9)])
    excluded_negatives = torch.tensor([[texts[m, 2] in (texts[i, 0], texts[i, 1])
                                        for m in range(9)] for i in range(9)])
    assert exclude[1, 8] and not exclude[2, 3] and excluded_negatives[2, 3]
    expected = info_nce(z[0], z[1], temperature=0.1, hard_negatives=torch.stack(z[2:], 1),
                        exclude=exclude, exclude_negatives=excluded_negatives)
    torch.testing.assert_close(got, expected)
    with pytest.raises(ValueError, match="needs a label column"):
        loss(features)
    with pytest.raises(ValueError, match="guide='self'"):
        SkcontrastLoss(model, InfoNCE(false_negatives=FalseNegativeGuard(
            guide=np.zeros((12, 4)))))


@pytest.mark.slow
def test_a_trainer_takes_the_selectors_batches_refreshed_from_the_model(model, tmp_path):
    from datasets import Dataset
    from sentence_transformers import (
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )

    data = Dataset.from_dict({"anchor": [r[0] for r in ROWS], "positive": [r[1] for r in ROWS],
                              "negative": [r[2] for r in ROWS],
                              "label": [r[3] for r in ROWS]})
    made, seen = [], []
    factory = batch_sampler(TemperedSelector(SpectralBatchSelector(4), max_same_label=0),
                            model=model)

    recording = recording_sampler(factory, made, seen)  # the batches the loader draws

    class Sampler:  # a callable the trainer calls with the dataset and its settings
        def __call__(self, dataset, **kwargs):
            return recording(dataset, **kwargs)

    args = SentenceTransformerTrainingArguments(
        output_dir=str(tmp_path), num_train_epochs=3, per_device_train_batch_size=4,
        learning_rate=1e-3, use_cpu=True, report_to=[], save_strategy="no",
        logging_strategy="no", disable_tqdm=True, batch_sampler=Sampler(), seed=3)
    loss = SkcontrastLoss(model, SymmetricInfoNCE(false_negatives=FalseNegativeGuard()))
    trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=data, loss=loss)
    state = trainer.train()
    sampler = made[-1]
    assert sampler.selector.base_selector.batch_size == 4  # the trainer's batch size
    assert sampler.selector.random_state == 3  # seeded from the trainer's seed
    assert sampler.refreshes >= 2  # the model's embeddings, refreshed every epoch
    assert state.global_step == len(seen) == 3 * len(sampler)
    labels = np.array([r[3] for r in ROWS])
    for batch in seen:  # the label guard held in every batch the trainer drew
        assert len(set(labels[batch])) == len(batch)


@pytest.mark.slow
def test_data_parallel_processes_train_on_whole_selector_batches(two_process_results):
    """Two gloo processes under the trainer (the trainer run of the suite's one torchrun
    launch, tests/scripts/distributed_fit.py): every process draws the same selector
    batches, Accelerate deals them out whole (batch i to process i mod 2), and an epoch
    covers every row once across the processes, the label guard holding in each batch."""
    run = two_process_results["results"]["sentence-transformers trainer"]
    assert not isinstance(run, dict), run["error"]
    rows, ranks = run
    assert ranks[0]["world"] == 2
    drawn = ranks[0]["drawn"]
    assert ranks[1]["drawn"] == drawn and len(drawn) == 3 * 4  # 3 epochs of 4 batches
    assert ranks[0]["refreshes"] >= 2  # the model's embeddings, refreshed
    index = {r[0]: i for i, r in enumerate(rows)}
    labels = np.array([r[2] for r in rows])
    for rank, result in enumerate(ranks):
        assert result["steps"] == 6
        trained = [[index[a] for a in batch] for batch in result["trained"]]
        assert trained == drawn[rank::2]  # whole batches, dealt in turn
    for epoch in range(3):
        rows_seen = sorted(i for batch in drawn[4 * epoch:4 * epoch + 4] for i in batch)
        assert rows_seen == list(range(16))
    for batch in drawn:
        assert len(batch) == 4 and len(set(labels[batch])) == 4


def _static_model(texts):
    """A SentenceTransformer of a StaticEmbedding over a WordPiece tokenizer trained on
    ``texts``: its tokenizer gives flat input_ids with offsets."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    raw = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    raw.train_from_iterator(texts, trainers.WordPieceTrainer(
        vocab_size=150, special_tokens=["[PAD]", "[UNK]"]))
    torch.manual_seed(0)
    from sentence_transformers import SentenceTransformer

    static = sentence_transformer_modules().StaticEmbedding(raw, embedding_dim=8)
    return SentenceTransformer(modules=[static],
                                  device="cpu")


def test_the_guard_reads_a_static_embeddings_flat_token_ids():
    # StaticEmbedding's input_ids are flat with offsets: the guard crashed ("expected
    # sequence of length 11 at dim 1 (got 7)")
    model = _static_model([t for row in ROWS for t in row[:3]])
    rows = ROWS[:9]
    features = _features(model, rows)
    assert "offsets" in features[0] and features[0]["input_ids"].ndim == 1
    loss = SkcontrastLoss(model, InfoNCE(0.1, false_negatives=FalseNegativeGuard()))
    got = loss(features)
    z = [model(f)["sentence_embedding"] for f in features]
    texts = np.array([r[:3] for r in rows], dtype=object)
    exclude = torch.tensor([[i != j and bool({texts[i, 0], texts[i, 1]} &
                                             {texts[j, 0], texts[j, 1]}) for j in range(9)]
                            for i in range(9)])
    excluded_negatives = torch.tensor([[texts[m, 2] in (texts[i, 0], texts[i, 1])
                                        for m in range(9)] for i in range(9)])
    assert exclude[1, 8] and excluded_negatives[2, 3]
    expected = info_nce(z[0], z[1], temperature=0.1, hard_negatives=torch.stack(z[2:], 1),
                        exclude=exclude, exclude_negatives=excluded_negatives)
    torch.testing.assert_close(got, expected)


def test_content_ids_are_one_rule_for_every_tokenizer_output(model):
    # padded ids with a mask (each column padded to its own length), flat ids with
    # offsets, strings: equal ids exactly for equal texts
    texts = [[r[c] for r in ROWS] for c in range(3)]
    expected = np.unique(np.array(texts, dtype=object).T.astype(str), return_inverse=True)[1]
    expected = expected.reshape(len(ROWS), 3)
    static = _static_model([t for row in ROWS for t in row[:3]])
    for forms in ([model.tokenize(t) for t in texts], [static.tokenize(t) for t in texts],
                  texts):
        ids = FalseNegativeGuard.content_ids(forms).numpy()
        for a in range(ids.size):
            for b in range(ids.size):
                same = expected.flat[a] == expected.flat[b]
                assert (ids.flat[a] == ids.flat[b]) == same
    with pytest.raises(ValueError, match="one entry per item"):
        FalseNegativeGuard.content_ids([texts[0], texts[1][:3]])


def test_refresh_every_is_the_deprecated_selection_pass_here_too():
    """``batch_sampler(refresh_every=...)`` reads as the sampler's: ``None`` is
    ``'cached'`` (as documented), a bad value is refused naming ``refresh_every``."""
    datasets = pytest.importorskip("datasets")
    table = datasets.Dataset.from_dict({"anchor": [r[0] for r in ROWS],
                                        "positive": [r[1] for r in ROWS]})
    for old, new in ((None, "cached"), (1, "fresh"), (3, 3)):
        with pytest.warns(FutureWarning, match=r"batch_sampler\(refresh_every=\.\.\.\) is "
                                               "deprecated"):
            make = batch_sampler(SpectralBatchSelector(4), refresh_every=old,
                                 embed=lambda rows: np.zeros((len(rows), 2, 3)))
        assert make(table, batch_size=4, drop_last=False).selection_pass == new
    for bad in (0, -1, "x"):
        with pytest.warns(FutureWarning), pytest.raises(
                ValueError, match="refresh_every must be None or an int >= 1"):
            batch_sampler(SpectralBatchSelector(4), refresh_every=bad)

"""Text: the hashed n-gram tokenizer, the bag encoder, strings in the estimators."""

import pickle

import numpy as np
import pytest
import torch
from sklearn.base import clone
from sklearn.feature_extraction.text import HashingVectorizer

import skcontrast
from skcontrast import ContrastiveEmbedder, SupConEmbedder
from skcontrast.text import HashingNgramTokenizer, NgramBagEncoder

PAIRS = [("thumbs up", "daumen hoch"), ("red heart", "rotes herz"),
         ("grinning face", "grinsendes gesicht"), ("flag germany", "flagge deutschland"),
         ("woman running", "laufende frau"), ("man running", "laufender mann"),
         ("cat face", "katzengesicht"), ("dog face", "hundegesicht")]
SMALL = {"max_epochs": 2, "random_state": 0, "n_components": 8, "hidden_layer_sizes": (16,),
         "batch_size": 4}


# --------------------------------------------------------------------------------------
# The tokenizer and the encoder
# --------------------------------------------------------------------------------------

@pytest.mark.parametrize("analyzer", ["char_wb+word", "char_wb", "char", "word"])
def test_the_tokenizer_gives_each_texts_set_of_hashed_ngrams(analyzer):
    texts = ["thumbs up", "Daumen hoch hoch", "旗 ドイツ", "a"]
    tok = HashingNgramTokenizer(analyzer=analyzer, ngram_range=(2, 3), n_features=2**10)
    ids = tok(texts)
    assert ids.dtype == np.int64 and ids.shape[0] == 4
    for text, row in zip(texts, ids, strict=True):
        expected = set()
        for kind in analyzer.split("+"):  # brute force: each n-gram hashed on its own
            vec = HashingVectorizer(analyzer=kind, ngram_range=(1, 1) if kind == "word"
                                    else (2, 3), n_features=2**10, alternate_sign=False,
                                    norm=None, token_pattern=r"(?u)\b\w+\b")
            for gram in vec.build_analyzer()(text):
                expected.add(int(vec.transform([gram]).indices[0]) + 1
                             if kind == "word" else None)
                if kind != "word":
                    one = HashingVectorizer(analyzer=lambda _, g=gram: [g], n_features=2**10,
                                            alternate_sign=False, norm=None)
                    expected.add(int(one.transform([""]).indices[0]) + 1)
        expected.discard(None)
        assert set(row[row > 0].tolist()) == expected
        assert (row[:len(expected)] > 0).all() and (row[len(expected):] == 0).all()
    assert tok.vocabulary_size == 2**10 + 1 and ids.max() <= 2**10


def test_tokenizer_settings_are_checked():
    with pytest.raises(ValueError, match="analyzer must be one of"):
        HashingNgramTokenizer(analyzer="bpe")(["a b"])
    with pytest.raises(ValueError, match="ngram_range must be"):
        HashingNgramTokenizer(ngram_range=(3, 2))(["a b"])
    with pytest.raises(ValueError, match="n_features must be >= 2"):
        HashingNgramTokenizer(n_features=1)(["a b"])


def test_the_bag_is_the_scaled_sum_of_its_ids_embeddings():
    torch.manual_seed(0)
    enc = NgramBagEncoder(50, 4).double()
    ids = torch.tensor([[3, 7, 7, 0, 0], [1, 2, 3, 4, 5], [9, 0, 0, 0, 0]])
    out = enc(ids)
    for row, got in zip(ids, out, strict=True):
        kept = row[row > 0]
        expected = enc.bag.weight[kept].sum(0) / np.sqrt(len(kept))
        torch.testing.assert_close(got, expected)
    # a Hugging Face tokenizer's ids with their attention mask: the mask says what pads
    mask = (ids > 0).long()
    shifted = torch.where(mask.bool(), ids, torch.full_like(ids, 11))  # pad id 11
    torch.testing.assert_close(enc(input_ids=shifted, attention_mask=mask), out)
    with_layers = NgramBagEncoder(50, 3, (6, 5))
    assert with_layers(ids).shape == (3, 3)


@pytest.mark.parametrize("weighting", ["binary", "idf"])
def test_the_sparse_bags_gradient_has_one_row_per_id_and_is_torchs_dense_one(weighting):
    """With sparse gradients the bag's gradient holds each id of the batch once (no row
    per occurrence, none for padding), in order, and equals the dense gradient of
    ``nn.EmbeddingBag`` (float64), HF's masked ids included."""
    torch.manual_seed(0)
    ids = torch.tensor([[3, 7, 7, 0, 0], [1, 2, 3, 4, 5], [9, 0, 0, 0, 0], [7, 7, 7, 7, 7]])
    enc = NgramBagEncoder(50, 4, weighting=weighting, sparse=True).double()
    if weighting == "idf":
        enc.fit_prior([ids])
    dense = NgramBagEncoder(50, 4, weighting=weighting, sparse=False).double()
    dense.load_state_dict(enc.state_dict())
    grad = torch.randn(len(ids), 4, dtype=torch.float64)
    for kwargs in ({"ids": ids}, {"input_ids": ids, "attention_mask": (ids > 0).long()}):
        enc.zero_grad(set_to_none=True)
        dense.zero_grad(set_to_none=True)
        (enc(**kwargs) * grad).sum().backward()
        (dense(**kwargs) * grad).sum().backward()
        sparse = enc.bag.weight.grad
        assert sparse.is_sparse
        assert sparse._indices()[0].tolist() == [1, 2, 3, 4, 5, 7, 9]  # once each
        torch.testing.assert_close(sparse.to_dense(), dense.bag.weight.grad)


def test_idf_weights_are_scikit_learns_smooth_idf_and_weigh_the_bag():
    from sklearn.feature_extraction.text import TfidfTransformer

    texts = ["red heart", "red hearts", "blue heart", "blue car", "a red car"]
    tok = HashingNgramTokenizer(n_features=2**10)
    ids = torch.as_tensor(tok(texts))
    enc = NgramBagEncoder(tok.vocabulary_size, 4, weighting="idf").double()
    assert enc.fit_prior([ids[:2], ids[2:]]) is enc  # blocks add up to one corpus
    counts = np.zeros((len(texts), tok.vocabulary_size))
    for r, row in enumerate(ids.numpy()):
        counts[r, row[row > 0]] = 1
    idf = TfidfTransformer(smooth_idf=True).fit(counts).idf_
    seen = counts.any(0)
    np.testing.assert_allclose(enc.id_weights.numpy()[seen], idf[seen], rtol=1e-6)
    row = ids[0][ids[0] > 0]
    w = enc.id_weights[row]
    expected = (w[:, None] * enc.bag.weight[row]).sum(0) / w.norm()
    torch.testing.assert_close(enc(ids[:1])[0], expected)
    binary = NgramBagEncoder(tok.vocabulary_size, 4)
    assert torch.equal(binary.fit_prior([ids]).id_weights, torch.ones(tok.vocabulary_size))


@pytest.mark.parametrize("weighting", ["binary", "idf"])
def test_the_untrained_bag_is_lexical_search(weighting):
    """The lexical prior: the cosine of two untrained embeddings approximates the
    cosine of their weighted n-gram sets (a random projection), closer as the width
    grows."""
    texts = ["thumbs up", "thumbs down", "red heart", "broken heart", "cat face",
             "smiling cat face", "flag germany", "flag france", "running man", "woman"]
    tok = HashingNgramTokenizer(n_features=2**12)
    ids = torch.as_tensor(tok(texts))
    counts = np.zeros((len(texts), tok.vocabulary_size))
    for r, row in enumerate(ids.numpy()):
        counts[r, row[row > 0]] = 1
    errors = []
    for width in (64, 4096):
        torch.manual_seed(0)
        enc = NgramBagEncoder(tok.vocabulary_size, width, weighting=weighting).double()
        enc.fit_prior([ids])
        weighted = counts * enc.id_weights.numpy()
        weighted /= np.linalg.norm(weighted, axis=1, keepdims=True)
        z = torch.nn.functional.normalize(enc(ids), dim=1).detach().numpy()
        errors.append(np.abs(z @ z.T - weighted @ weighted.T).max())
    assert errors[1] < 0.1 < errors[0]


def test_fit_prior_refuses_ids_outside_the_vocabulary():
    enc = NgramBagEncoder(10, 4, weighting="idf")
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 10\)"):
        enc.fit_prior([torch.tensor([[3, 12]])])
    with pytest.raises(ValueError, match="weighting must be one of"):
        NgramBagEncoder(10, 4, weighting="tfidf")


# --------------------------------------------------------------------------------------
# Strings in the estimators
# --------------------------------------------------------------------------------------

def test_string_pairs_in_strings_out():
    est = ContrastiveEmbedder(**SMALL).fit(PAIRS)
    assert isinstance(est.tokenizer_, HashingNgramTokenizer)
    Z = est.transform(["thumbs up", "a text never seen, longer than any in training"])
    assert Z.shape == (2, 8) and np.isfinite(Z).all()
    np.testing.assert_allclose(np.linalg.norm(Z, axis=1), 1, atol=1e-5)
    # an (n, 2) array of str is the same data
    again = ContrastiveEmbedder(**SMALL).fit(np.array(PAIRS))
    np.testing.assert_allclose(again.transform(["thumbs up"]), est.transform(["thumbs up"]),
                               atol=1e-6)
    V = est.transform_view(["daumen hoch"], view=1)
    assert V.shape == (1, 8)
    assert 0 <= est.score(PAIRS) <= 1
    U, V = est.transform_pairs(PAIRS)
    assert U.shape == V.shape == (8, 8)


def test_the_default_text_encoder_takes_module_options_and_idf_from_the_training_texts():
    tok = HashingNgramTokenizer(n_features=2**10)
    est = ContrastiveEmbedder(**{**SMALL, "hidden_layer_sizes": "auto"}, tokenizer=tok,
                              module__weighting="idf").fit(PAIRS)
    encoder = est.net_.module_.encoders[0]
    assert encoder.weighting == "idf" and not encoder.layers  # 'auto': a linear bag
    expected = NgramBagEncoder(tok.vocabulary_size, 8, weighting="idf").fit_prior(
        [torch.as_tensor(tok([a for a, _ in PAIRS])), torch.as_tensor(tok([b for _, b in PAIRS]))])
    torch.testing.assert_close(encoder.id_weights, expected.id_weights)
    with pytest.raises(ValueError, match=r"\['colour'\] are not options of the default text"):
        ContrastiveEmbedder(**SMALL, module__colour="red").fit(PAIRS)
    with pytest.raises(ValueError, match="module=None builds the default MLP"):
        ContrastiveEmbedder(**SMALL, module__weighting="idf").fit(
            np.random.default_rng(0).normal(size=(16, 2, 3)))


def test_auto_widths_follow_the_input():
    text = ContrastiveEmbedder(max_epochs=1, batch_size=4, random_state=0,
                               tokenizer=HashingNgramTokenizer(n_features=2**10)).fit(PAIRS)
    assert text.n_components_ == 256 and not text.net_.module_.encoders[0].layers
    numbers = ContrastiveEmbedder(max_epochs=1, batch_size=4, random_state=0).fit(
        np.random.default_rng(0).normal(size=(16, 2, 3)))
    assert numbers.n_components_ == 32
    assert [m.out_features for m in numbers.net_.module_.encoders[0].modules()
            if isinstance(m, torch.nn.Linear)] == [128, 32]


def test_a_text_model_saves_clones_and_pickles(tmp_path):
    est = ContrastiveEmbedder(**SMALL).fit(PAIRS)
    texts = ["thumbs up", "hundegesicht"]
    again = skcontrast.load(est.save(tmp_path / "m"))
    np.testing.assert_array_equal(again.transform(texts), est.transform(texts))
    assert again.tokenizer_.get_params() == est.tokenizer_.get_params()
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(est)).transform(texts),
                                  est.transform(texts))
    tok = HashingNgramTokenizer(n_features=2**12)
    cloned = clone(ContrastiveEmbedder(tokenizer=tok, **SMALL))
    assert cloned.tokenizer is not tok and cloned.tokenizer.n_features == 2**12
    # a tokenizer a file cannot hold is named before anything is written
    def own_tokenizer(texts):
        return tok(texts)

    own_tokenizer.vocabulary_size = tok.vocabulary_size
    own = ContrastiveEmbedder(tokenizer=own_tokenizer, **SMALL).fit(PAIRS)
    with pytest.raises(ValueError, match="tokenizer"):
        own.save(tmp_path / "own")
    assert not (tmp_path / "own").exists()


@pytest.mark.parametrize(("X", "message"), [
    ([("a", "b"), ("c", "")], r"X\[1, 1\] is an empty string"),
    ([("a", "b"), ("c", 5)], r"X\[1, 1\] is .*5.*must be a string"),
    ([("a", "b"), ("c",)], r"rows of X must hold equally many texts; X\[1\] has 1"),
    (["a b", ("c", "d")], r"X\[0\] is 'a b'; a text X is a list of strings or of rows"),
    (["a b", "c d"], "contrastive training takes pairs of texts"),
])
def test_bad_text_is_named_by_row(X, message):
    with pytest.raises(ValueError, match=message):
        ContrastiveEmbedder(**SMALL).fit(X)


def test_text_after_other_input_and_the_reverse_are_refused():
    est = ContrastiveEmbedder(**SMALL).fit(PAIRS)
    with pytest.raises(ValueError, match="fitted on text"):
        est.transform(np.zeros((2, 5), dtype=np.float32))
    with pytest.raises(ValueError, match="list of strings"):
        est.transform_view(np.zeros((2, 5)), view=1)
    X = np.random.default_rng(0).normal(size=(16, 2, 4)).astype(np.float32)
    dense = ContrastiveEmbedder(**SMALL).fit(X)
    with pytest.raises(ValueError, match="not text; got strings"):
        dense.transform(["thumbs up"])
    with pytest.raises(ValueError, match="single string; pass a list"):
        est.transform("thumbs up")


def test_supcon_on_labelled_strings():
    texts = [a for a, _ in PAIRS] + [b for _, b in PAIRS]
    y = list(range(8)) * 2
    est = SupConEmbedder(**SMALL).fit(texts, y)
    assert est.transform(["thumbs up"]).shape == (1, 8)
    with pytest.raises(ValueError, match="takes single texts"):
        SupConEmbedder(**SMALL).fit(PAIRS, y[:8])


def test_a_tokenizer_of_ones_own():
    vocabulary = {w: i + 1 for i, w in enumerate(sorted({w for p in PAIRS for t in p
                                                         for w in t.split()}))}

    def words(texts):
        rows = [[vocabulary.get(w, 0) for w in t.split()] for t in texts]
        width = max(map(len, rows))
        return np.array([r + [0] * (width - len(r)) for r in rows])

    # without a vocabulary size the default encoder cannot size its embedding
    with pytest.raises(ValueError, match="holds integers"):
        ContrastiveEmbedder(tokenizer=words, **SMALL).fit(PAIRS)
    words.vocabulary_size = len(vocabulary) + 1
    est = ContrastiveEmbedder(tokenizer=words, **SMALL).fit(PAIRS)
    assert est.input_spec_.views[0].vocabulary == len(vocabulary) + 1
    assert est.transform(["thumbs up"]).shape == (1, 8)
    words.vocabulary_size = 3  # ids beyond it are refused, naming the id
    with pytest.raises(ValueError, match="beyond its vocabulary of 3"):
        ContrastiveEmbedder(tokenizer=words, **SMALL).fit(PAIRS)
    with pytest.raises(ValueError, match="tokenizer must be a callable"):
        ContrastiveEmbedder(tokenizer="bert-base", **SMALL).fit(PAIRS)


def test_a_hugging_face_tokenizer_trained_here():
    pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    raw.train_from_iterator([t for p in PAIRS for t in p], trainers.WordPieceTrainer(
        vocab_size=200, special_tokens=["[PAD]", "[UNK]"]))
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, pad_token="[PAD]", unk_token="[UNK]")
    est = ContrastiveEmbedder(tokenizer=tok, **SMALL).fit(PAIRS)
    view = est.input_spec_.views[0]
    assert view.vocabulary == len(tok) and [p.name for p in view.parts][:2] == \
        ["input_ids", "attention_mask"][:len(view.parts)]
    Z = est.transform(["thumbs up", "red heart"])
    assert Z.shape == (2, 8) and np.isfinite(Z).all()


# --------------------------------------------------------------------------------------
# Chunked search, hard-negative mining
# --------------------------------------------------------------------------------------

def block(S, qi, dj):
    return S[qi.numpy()][:, dj.numpy()]


@pytest.mark.parametrize(("text", "tokenizer"), [
    ("👍", {"analyzer": "word"}), ("!!!", {"analyzer": "word"}),
    ("ab", {"analyzer": "char", "ngram_range": (3, 4)})])
def test_a_text_with_no_token_is_refused_in_fit_transform_and_mining(text, tokenizer):
    # it embedded to the zero vector, whose cosine is undefined
    from skcontrast.text import HashingNgramTokenizer, mine_hard_negatives

    tokens = HashingNgramTokenizer(**tokenizer)
    bad = [*PAIRS[:5], ("fine text", text), *PAIRS[5:]]
    with pytest.raises(ValueError, match=rf"X\[5, 1\] \('{text}'\) yields no token"):
        ContrastiveEmbedder(**SMALL, tokenizer=tokens).fit(bad)
    est = ContrastiveEmbedder(**SMALL, tokenizer=tokens).fit(PAIRS)
    with pytest.raises(ValueError, match=rf"X\[2\] \('{text}'\) yields no token"):
        est.transform(["daumen hoch", "rotes herz", text])
    anchors = [a for a, _ in PAIRS]
    positives = [b for _, b in PAIRS]
    with pytest.raises(ValueError, match="yields no token"):
        mine_hard_negatives(anchors, positives, [*positives, text], embedding=est,
                            n_negatives=1, rank_window=(0, 3), device="cpu")


@pytest.mark.parametrize(("query_chunk", "document_chunk"), [(3, 4), (100, 1000), (1, 1)])
def test_top_k_search_is_a_sort_whatever_the_chunks(query_chunk, document_chunk):
    from skcontrast.text import top_k_search

    rng = np.random.default_rng(0)
    S = np.round(rng.normal(size=(7, 23)), 1).astype(np.float32)  # many ties
    values, indices = top_k_search(lambda qi, dj: torch.from_numpy(block(S, qi, dj)), 7, 23,
                                   5, query_chunk=query_chunk,
                                   document_chunk=document_chunk)
    for row, got_v, got_i in zip(S, values, indices, strict=True):
        expected = sorted(range(23), key=lambda j, row=row: (-row[j], j))[:5]
        assert got_i.tolist() == expected
        np.testing.assert_array_equal(got_v, row[expected])
    values, indices = top_k_search(lambda qi, dj: torch.from_numpy(block(S, qi, dj)), 7, 3, 5)
    assert (indices[:, 3:] == -1).all() and np.isneginf(values[:, 3:]).all()


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_top_k_search_refuses_nan_and_inf_scores_naming_the_query(bad):
    # NaN ranked first, silently
    from skcontrast.text import top_k_search

    S = np.arange(40, dtype=np.float32).reshape(4, 10)
    S[2, 7] = bad
    with pytest.raises(ValueError, match=f"the scores of query 2 hold {bad}: scores must "
                                         "be finite, or -inf"):
        top_k_search(lambda qi, dj: torch.from_numpy(block(S, qi, dj)), 4, 10, 3,
                     query_chunk=3, document_chunk=4)
    S[2, 7] = -np.inf  # an excluded document
    _, indices = top_k_search(lambda qi, dj: torch.from_numpy(block(S, qi, dj)), 4, 10, 10)
    assert indices[2].tolist() == [9, 8, 6, 5, 4, 3, 2, 1, 0, -1]


def _mining_case(seed=0, n=12, m=30, d=5):
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(n, d))
    P = A + 0.5 * rng.normal(size=(n, d))
    C = rng.normal(size=(m, d))
    C[3] = P[2]  # a duplicate of pair 2's positive, and of pair 5's anchor
    C[7] = A[5]
    return A, P, C


@pytest.mark.parametrize(("window", "margin", "with_groups"),
                         [((0, 10), None, False), ((2, 12), None, True), ((0, 30), 0.9, False),
                          ((1, 8), 0.95, True), ((0, 4), 0.2, False)])
def test_mined_negatives_equal_the_float64_brute_force(window, margin, with_groups):
    from reference import mine_brute_force

    from skcontrast.text import mine_hard_negatives

    A, P, C = _mining_case()
    groups = np.arange(12) % 4 if with_groups else None
    corpus_groups = np.arange(30) % 6 if with_groups else None
    keys = np.unique(np.concatenate([P, A, C]), axis=0, return_inverse=True)[1].reshape(-1)
    expected = mine_brute_force(A, P, C, 3, *window, margin, keys[12:24], keys[:12], keys[24:],
                                groups, corpus_groups)
    short = any(-1 in row for row in expected)
    with pytest.warns(UserWarning, match="found fewer than 3") if short else _no_warning():
        mined = mine_hard_negatives(A, P, C, n_negatives=3, rank_window=window,
                                    relative_margin=margin, groups=groups,
                                    corpus_groups=corpus_groups, device="cpu",
                                    query_chunk=5, document_chunk=7)
    assert mined.indices.tolist() == expected
    assert 3 not in mined.indices[2] and 7 not in mined.indices[5]
    assert (mined.complete == (mined.indices >= 0).all(1)).all()
    found = mined.indices >= 0
    cos = (A / np.linalg.norm(A, axis=1, keepdims=True)) @ \
        (C / np.linalg.norm(C, axis=1, keepdims=True)).T
    np.testing.assert_allclose(mined.scores[found],
                               np.take_along_axis(cos, np.where(found, mined.indices, 0), 1)
                               [found], atol=1e-5)


@pytest.mark.parametrize("document_chunk", [1, 5, 7, 13, 64, 1000])
@pytest.mark.parametrize("groups_of", [None, "small", "large"])
def test_identical_corpus_rows_rank_by_index_in_any_chunking(document_chunk, groups_of):
    # a matrix product can give two copies of a row different last bits in different
    # blocks: 17 of 30 chunkings let a larger index rank first. Copies may sit in
    # several groups; a group of 400 is masked inside the search
    from reference import mine_brute_force

    from skcontrast.text import mine_hard_negatives

    rng = np.random.default_rng(0)
    m = 90 if groups_of != "large" else 600
    A = rng.normal(size=(9, 16)).astype(np.float32)
    P = A + 0.5 * rng.normal(size=(9, 16)).astype(np.float32)
    C = rng.normal(size=(12, 16)).astype(np.float32)[rng.integers(0, 12, size=m)]
    groups = None if groups_of is None else np.arange(9) % 3
    corpus_groups = None if groups_of is None else rng.integers(0, 4, size=m)
    if groups_of == "large":
        corpus_groups[:400] = 0
    keys = np.unique(np.concatenate([P, A, C]), axis=0, return_inverse=True)[1].reshape(-1)
    expected = mine_brute_force(A, P, C, 4, 0, 12, None, keys[9:18], keys[:9], keys[18:],
                                groups, corpus_groups)
    mined = mine_hard_negatives(A, P, C, n_negatives=4, rank_window=(0, 12), groups=groups,
                                corpus_groups=corpus_groups, device="cpu", query_chunk=4,
                                document_chunk=document_chunk)
    assert mined.indices.tolist() == expected


@pytest.mark.parametrize(("copies", "groups_of"), [("six directions", None),
                                                    ("six directions", "large"),
                                                    ("one direction", None)])
def test_mined_negatives_do_not_depend_on_the_block_sizes_where_candidates_nearly_tie(
        copies, groups_of):
    # copies of a few directions at other scales: their cosines tie in real arithmetic and
    # round differently in float32 in blocks of other shapes (the float32 search gave
    # other negatives in 26 of these 30 chunkings). A group of 300 is masked inside the
    # search; 40 copies of one direction make a near-tie wider than the short list
    import itertools

    from reference import mine_brute_force

    from skcontrast.text import mine_hard_negatives

    rng = np.random.default_rng(0)
    m = 420 if groups_of else 120
    if copies == "one direction":
        directions = rng.normal(size=(1, 48)).astype(np.float32)
        C = rng.normal(size=(m, 48)).astype(np.float32)
        C[:40] = directions * rng.uniform(0.5, 2, size=(40, 1)).astype(np.float32)
    else:
        directions = rng.normal(size=(6, 48)).astype(np.float32)
        scales = rng.choice(np.array([0.1, 0.3, 1, 3, 5, 7, 11, 13], np.float32), size=m)
        C = directions[rng.integers(0, 6, size=m)] * scales[:, None]
    A = rng.normal(size=(12, 48)).astype(np.float32) + 3 * directions[0]
    P = A + 0.5 * rng.normal(size=(12, 48)).astype(np.float32)
    groups = None if groups_of is None else np.arange(12) % 2
    corpus_groups = None if groups_of is None else np.where(np.arange(m) < 300, 0, 1)
    keys = np.unique(np.concatenate([P, A, C]), axis=0, return_inverse=True)[1].reshape(-1)
    expected = mine_brute_force(A, P, C, 4, 2, 20, 0.99, keys[12:24], keys[:12], keys[24:],
                                groups, corpus_groups)
    results = {}
    for chunks in itertools.product([1, 3, 7, 16, 1000], [2, 5, 7, 13, 64, 1000]):
        mined = mine_hard_negatives(A, P, C, n_negatives=4, rank_window=(2, 20),
                                    relative_margin=0.99, groups=groups,
                                    corpus_groups=corpus_groups, device="cpu",
                                    query_chunk=chunks[0], document_chunk=chunks[1])
        results[chunks] = (mined.indices.tolist(), mined.scores.tolist())
    assert [chunks for chunks, got in results.items() if got != results[1000, 1000]] == []
    assert results[1000, 1000][0] == expected


def test_a_corpus_smaller_than_n_negatives_leaves_minus_one_with_a_warning():
    from skcontrast.text import mine_hard_negatives

    rng = np.random.default_rng(1)
    A, C = rng.normal(size=(3, 4)), rng.normal(size=(3, 4))
    with pytest.warns(UserWarning, match="3 of 3 pairs found fewer than 4 negatives"):
        mined = mine_hard_negatives(A, A + 0.1, C, n_negatives=4, rank_window=(0, 10),
                                    device="cpu")
    assert mined.indices.shape == (3, 4) and (mined.indices[:, 3] == -1).all()
    assert sorted(mined.indices[0, :3].tolist()) == [0, 1, 2]
    assert np.isnan(mined.scores[:, 3]).all() and not mined.complete.any()


def test_large_groups_are_masked_inside_the_search():
    # a group of 300 corpus items: too many to search past, so they are masked in blocks
    from reference import mine_brute_force

    from skcontrast.text import mine_hard_negatives

    rng = np.random.default_rng(3)
    A = rng.normal(size=(6, 4))
    P = A + 0.3 * rng.normal(size=(6, 4))
    C = rng.normal(size=(600, 4))
    groups = np.array([0, 0, 1, 1, 2, 2])
    corpus_groups = np.where(np.arange(600) < 300, 0, 1 + np.arange(600) % 5)
    mined = mine_hard_negatives(A, P, C, n_negatives=3, rank_window=(1, 20), groups=groups,
                                corpus_groups=corpus_groups, device="cpu", document_chunk=64)
    keys = np.unique(np.concatenate([P, A, C]), axis=0, return_inverse=True)[1].reshape(-1)
    expected = mine_brute_force(A, P, C, 3, 1, 20, None, keys[6:12], keys[:6], keys[12:],
                                groups, corpus_groups)
    assert mined.indices.tolist() == expected
    assert (corpus_groups[mined.indices[:2]] != 0).all()


class _no_warning:
    def __enter__(self):
        import warnings

        self._catch = warnings.catch_warnings()
        self._catch.__enter__()
        warnings.simplefilter("error")

    def __exit__(self, *exc):
        return self._catch.__exit__(*exc)


def test_mining_texts_gives_a_table_and_never_a_duplicate_of_the_positive():
    from skcontrast.text import mine_hard_negatives

    est = ContrastiveEmbedder(**SMALL).fit(PAIRS)
    anchors = [a for a, _ in PAIRS]
    positives = [b for _, b in PAIRS]
    corpus = [*positives, "daumen hoch", "gesicht", "herz"]  # one duplicate of a positive
    mined = mine_hard_negatives(anchors, positives, corpus, embedding=est, n_negatives=2,
                                rank_window=(0, 6), device="cpu")
    assert mined.table.shape == (8, 4)
    for row, negatives in zip(mined.table, mined.indices, strict=True):
        assert row[1] not in row[2:]
        assert all(corpus[j] != row[1] for j in negatives)
    # deterministic, and the same as mining the embeddings (the duplicate by content)
    again = mine_hard_negatives(anchors, positives, corpus, embedding=est, n_negatives=2,
                                rank_window=(0, 6), device="cpu")
    np.testing.assert_array_equal(again.indices, mined.indices)
    with pytest.raises(ValueError, match="rank_window must be"):
        mine_hard_negatives(anchors, positives, embedding=est, rank_window=(3, 4))
    with pytest.raises(ValueError, match="give embedding="):
        mine_hard_negatives(anchors, positives)
    with pytest.raises(ValueError, match="all be texts or all embeddings"):
        mine_hard_negatives(anchors, np.zeros((8, 3)), embedding=est)


# --------------------------------------------------------------------------------------
# Hybrid retrieval
# --------------------------------------------------------------------------------------

@pytest.mark.parametrize("weight", [0.0, 0.3, 1.0])
def test_hybrid_search_ranks_by_the_fused_score(weight):
    from reference import hybrid_scores

    from skcontrast.text import HybridRetriever

    est = ContrastiveEmbedder(**SMALL).fit(PAIRS)
    hybrid = HybridRetriever(est, weight=weight, prefit=True, query_chunk=3,
                             document_chunk=5).fit(PAIRS)
    queries = [a for a, _ in PAIRS]
    documents = [b for _, b in PAIRS]
    values, indices = hybrid.index(documents).search(queries, k=4)
    expected = hybrid_scores(est.transform(queries), est.transform_view(documents, view=1),
                             hybrid.vectorizer_.transform(queries),
                             hybrid.vectorizer_.transform(documents), weight)
    for row, got_v, got_i in zip(expected, values, indices, strict=True):
        order = sorted(range(8), key=lambda j, row=row: (-round(row[j], 5), j))[:4]
        np.testing.assert_allclose(got_v, [row[j] for j in got_i], atol=1e-5)
        np.testing.assert_allclose(sorted(got_v, reverse=True), [row[j] for j in order],
                                   atol=1e-5)


def test_bm25_scores_follow_the_formula():
    from skcontrast.text import HybridRetriever

    docs = ["red heart red", "thumbs up", "red car", "heart of gold"]
    hybrid = HybridRetriever(weight=1.0, lexical="bm25", analyzer="word", ngram_range=(1, 1),
                             k1=1.5, b=0.5).fit([(d, d) for d in docs])
    values, indices = hybrid.index(docs).search(["red heart"], k=4)
    vocab = hybrid.vectorizer_.vocabulary_
    n, lengths = 8, [3, 2, 2, 3]  # the fit saw each text twice
    average = np.mean(lengths)
    frequency = {"red": 4, "heart": 4}
    raw = []
    for doc, length in zip(docs, lengths, strict=True):
        total = 0.0
        for term in ("red", "heart"):
            tf = doc.split().count(term)
            idf = np.log(1 + (n - frequency[term] + 0.5) / (frequency[term] + 0.5))
            total += idf * tf * 2.5 / (tf + 1.5 * (0.5 + 0.5 * length / average))
        raw.append(total)
    assert vocab and indices[0, 0] == 0
    np.testing.assert_allclose(values[0], np.sort(raw)[::-1] / max(raw), atol=1e-6)


def test_the_weight_is_tuned_by_grid_search_without_retraining():
    from sklearn.model_selection import GridSearchCV

    from skcontrast.text import HybridRetriever

    est = ContrastiveEmbedder(**SMALL).fit(PAIRS)
    search = GridSearchCV(HybridRetriever(est, prefit=True), {"weight": [0.0, 0.5, 1.0]},
                          cv=2).fit(np.array(PAIRS))
    assert search.best_estimator_.estimator_ is est  # the fitted model, not a refit
    assert set(search.cv_results_["param_weight"]) == {0.0, 0.5, 1.0}
    with pytest.raises(ValueError, match="estimator is None"):
        HybridRetriever(weight=0.5).fit(PAIRS)
    lexical_only = HybridRetriever(weight=1.0).fit(PAIRS).index(["rotes herz", "daumen hoch"])
    assert 0 <= lexical_only.score(PAIRS) <= 1
    # scoring searches the pairs' texts without replacing the indexed corpus
    assert lexical_only.search(["red heart"], k=2)[1].tolist() == [[0, 1]]
    indexed = HybridRetriever(est, weight=1.0, prefit=True).fit(PAIRS).index(["rotes herz"])
    with pytest.raises(ValueError, match="indexed for lexical search alone"):
        indexed.set_params(weight=0.5).search(["red heart"])


def test_auto_weight_is_the_best_recall_on_held_out_pairs_with_0_and_1_among_them():
    from skcontrast.text import AUTO_WEIGHTS, HybridRetriever

    assert AUTO_WEIGHTS[0] == 0.0 and AUTO_WEIGHTS[-1] == 1.0
    est = ContrastiveEmbedder(**SMALL).fit(PAIRS[:6])
    held_out = np.array([*PAIRS[6:], ("thumbs down", "daumen runter")])
    hybrid = HybridRetriever(est, prefit=True).fit(PAIRS[:6], X_val=held_out)
    for w, recall in hybrid.weight_scores_.items():  # each candidate, as score counts it
        fixed = HybridRetriever(est, weight=w, prefit=True).fit(PAIRS[:6])
        assert recall == pytest.approx(fixed.score(held_out))
    best = max(hybrid.weight_scores_.values())
    assert hybrid.weight_scores_[hybrid.weight_] == best
    assert hybrid.weight_mrr_[hybrid.weight_] == max(
        m for w, m in hybrid.weight_mrr_.items() if hybrid.weight_scores_[w] == best)
    assert all(r <= m <= 1 for r, m in zip(hybrid.weight_scores_.values(),
                                           hybrid.weight_mrr_.values(), strict=True))
    assert hybrid.index(["rotes herz"]).search(["red heart"], k=1)[1].shape == (1, 1)


def test_auto_weight_tells_recall_ties_apart_by_reciprocal_rank_then_takes_the_middle():
    from skcontrast.text._hybrid import _best_weight

    recall = {0.0: 0.5, 0.1: 0.8, 0.2: 0.8, 0.3: 0.8, 0.4: 0.8, 0.5: 0.1}
    # the reciprocal rank separates recall's ties
    assert _best_weight(recall, {0.0: 0.6, 0.1: 0.85, 0.2: 0.9, 0.3: 0.85, 0.4: 0.8,
                                 0.5: 0.2}) == 0.2
    # tied on both (a plateau): its middle, never its edge
    flat = {w: 0.85 if r == 0.8 else r for w, r in recall.items()}
    assert _best_weight(recall, flat) == 0.2
    assert _best_weight({0.0: 1.0}, {0.0: 1.0}) == 0.0


def test_auto_weight_stays_off_the_lexical_edge_where_the_lexical_side_matches_nothing():
    from skcontrast.text import HybridRetriever

    # documents in another script: TF-IDF scores every pair 0, so every weight below 1
    # ranks alike; the weight chosen is not 0.9, the last before lexical search alone
    latin = ["red heart", "thumbs up", "dog face", "cat face", "sun", "moon", "star",
             "tree", "fire", "car"]
    cyrillic = ["красное сердце", "большой палец", "морда собаки", "морда кошки", "солнце",
                "луна", "звезда", "дерево", "огонь", "машина"]
    pairs = list(zip(latin, cyrillic, strict=True))
    est = ContrastiveEmbedder(max_epochs=10, batch_size=5, lr=0.05, random_state=0).fit(pairs)
    with pytest.warns(UserWarning, match="10 of 10 held-out pairs"):  # seen pairs: a test
        hybrid = HybridRetriever(est, prefit=True).fit(pairs, X_val=pairs)
    assert hybrid.weight_scores_[0.0] > hybrid.weight_scores_[1.0]
    tied = [w for w in hybrid.weight_scores_ if w < 1.0]
    assert len({(hybrid.weight_scores_[w], hybrid.weight_mrr_[w]) for w in tied}) == 1
    assert hybrid.weight_ == 0.4


@pytest.mark.filterwarnings("ignore:weight='auto' chose weight_=")  # tiny: may tie
def test_auto_weight_holds_out_whole_groups_from_the_training_of_the_model(monkeypatch):
    from skcontrast.text import HybridRetriever

    seen = {}
    original = ContrastiveEmbedder.fit

    def spy(self, X, y=None, **kwargs):
        seen["X"] = [tuple(row) for row in np.asarray(X)]
        return original(self, X, y, **kwargs)

    monkeypatch.setattr(ContrastiveEmbedder, "fit", spy)
    pairs = [(a, b) for a, b in PAIRS for _ in range(2)] + [("sun", "sonne"), ("moon", "mond")]
    hybrid = HybridRetriever(ContrastiveEmbedder(**SMALL), validation_fraction=0.3,
                             random_state=0).fit(pairs)
    trained = set(seen["X"])
    held_out = {p for p in pairs if p not in trained}
    assert held_out and len(trained) + len(held_out) == len(set(pairs))
    assert not {a for a, _ in held_out} & {a for a, _ in trained}  # no query trained on
    assert 0.0 <= hybrid.weight_ <= 1.0 and len(hybrid.weight_scores_) == 11
    with pytest.raises(ValueError, match="prefit=True only you know which"):
        HybridRetriever(hybrid.estimator_, prefit=True).fit(pairs)
    with pytest.raises(ValueError, match=r"validation_fraction must lie in \(0, 1\)"):
        HybridRetriever(ContrastiveEmbedder(**SMALL), validation_fraction=1.0).fit(pairs)
    assert HybridRetriever().fit(pairs).weight_ == 1.0  # lexical alone


@pytest.mark.parametrize(("prefit", "X_val", "y_val", "message"), [
    (True, PAIRS[6:], [0, 1, 2], r"y_val must hold one group per pair of X_val, 2 of "
                                 r"them; got \[0, 1, 2\] \(3 entries\)"),
    (True, PAIRS[6:], [0], r"y_val must hold one group per pair of X_val, 2 of them; got "
                           r"\[0\] \(1 entry\)"),
    (True, PAIRS[6:], np.zeros((2, 2)), r"y_val must hold one group per pair of X_val, 2 of "
                                        r"them; got ndarray of shape \(2, 2\)"),
    (False, ["cat face", "dog face"], None, r"X_val must hold held-out pairs, rows of two "
                                            r"texts \(query, document\); got 2 single texts "
                                            r"\(X_val\[0\] = 'cat face'\)"),
    (False, [], None, "X_val must hold held-out pairs.*; got no row"),
    (True, None, [0, 1], r"y_val gives the groups of held-out pairs, but X_val is None"),
])
def test_held_out_pairs_and_their_groups_are_refused_up_front(monkeypatch, prefit, X_val,
                                                              y_val, message):
    # a y_val longer or shorter than X_val failed inside the search with torch's "size of
    # tensor a (2) must match" or an IndexError; single texts with an IndexError
    from skcontrast.text import HybridRetriever

    est = ContrastiveEmbedder(**SMALL).fit(PAIRS[:6])
    if not prefit:  # refused before anything trains
        monkeypatch.setattr(ContrastiveEmbedder, "fit", lambda *a, **k: pytest.fail("fit"))
    retriever = HybridRetriever(est if prefit else ContrastiveEmbedder(**SMALL),
                                prefit=prefit)
    with pytest.raises(ValueError, match=message):
        retriever.fit(PAIRS[:6], X_val=X_val, y_val=y_val)
    with pytest.raises(ValueError, match=r"y must hold one group per pair of X, 6 of them; "
                                         r"got \[0, 1\] \(2 entries\)"):
        retriever.fit(PAIRS[:6], y=[0, 1])


def test_auto_weight_warns_when_one_held_out_pair_ties_every_weight():
    from skcontrast.text import HybridRetriever

    est = ContrastiveEmbedder(**SMALL).fit(PAIRS[:6])
    with pytest.warns(UserWarning, match=r"weight='auto' chose weight_=0.5 among tied "
                                         r"weights: one held-out pair"):
        hybrid = HybridRetriever(est, prefit=True).fit(PAIRS[:6], X_val=PAIRS[6:7])
    assert len(set(hybrid.weight_scores_.values())) == 1 and hybrid.weight_ == 0.5
    with _no_warning():  # weights told apart: no word
        told = HybridRetriever(est, prefit=True).fit(
            PAIRS[:6], X_val=[*PAIRS[6:], ("thumbs down", "daumen runter")])
    assert len({(told.weight_scores_[w], told.weight_mrr_[w])
                for w in told.weight_scores_}) > 1


def test_auto_weight_warns_on_held_out_pairs_the_model_trained_on():
    # the retriever trains the model on X: pairs of X_val repeated in X are pairs it
    # trained on; a prefit model keeps no record of its training pairs, so X stands for
    # them
    from skcontrast.text import HybridRetriever

    with pytest.warns(UserWarning, match=r"3 of 4 held-out pairs \(X_val\) are pairs the "
                                         r"model trained on \(pairs of X\)"):
        HybridRetriever(ContrastiveEmbedder(**SMALL)).fit(
            PAIRS[:6], X_val=[*PAIRS[3:6], ("thumbs down", "daumen runter")])
    est = ContrastiveEmbedder(**SMALL).fit(PAIRS[:6])
    with pytest.warns(UserWarning, match=r"2 of 2 held-out pairs \(X_val\) are pairs of X, "
                                         r"which a prefit model is taken to have trained on"):
        HybridRetriever(est, prefit=True).fit(PAIRS[:6], X_val=PAIRS[4:6])
    with _no_warning():  # a pair's texts in other pairs are not the pair
        HybridRetriever(est, prefit=True).fit(
            PAIRS[:6], X_val=[("red heart", "daumen hoch"), ("thumbs up", "rotes herz"),
                              PAIRS[6]])


# --------------------------------------------------------------------------------------
# Hard-negative columns and the false-negative guard in a fit
# --------------------------------------------------------------------------------------

TRIPLES = [("thumbs up", "daumen hoch", "daumen runter"),
           ("red heart", "rotes herz", "blaues herz"),
           ("dog face", "hundegesicht", "katzengesicht"),
           ("cat face", "katzengesicht", "hundegesicht"),
           ("man running", "laufender mann", "laufende frau"),
           ("woman running", "laufende frau", "laufender mann"),
           ("flag germany", "flagge deutschland", "flagge dänemark"),
           ("red heart", "rotes herz", "grünes herz")]  # a duplicate pair (other negative)


class _Steps:
    """Callback: each training step's embeddings, dataset rows and loss."""

    def __init__(self):
        from skorch.callbacks import Callback

        steps = self.steps = []

        class Record(Callback):
            def on_batch_end(self, net, batch=None, training=None, **step):
                if training:
                    steps.append((step["y_pred"].detach().double(), batch.index.clone(),
                                  float(step["loss"].detach())))
        self.callback = Record()


@pytest.mark.parametrize(("loss", "function"), [("symmetric_info_nce", "symmetric_info_nce"),
                                                ("nt_xent", "nt_xent"),
                                                ("hard_negative_nce", "hard_negative_nce")])
def test_hard_negative_columns_train_the_loss_of_the_columns(loss, function):
    import skcontrast.losses as L

    record = _Steps()
    est = ContrastiveEmbedder(**{**SMALL, "max_epochs": 1}, loss=loss,
                              callbacks=[record.callback]).fit(TRIPLES)
    assert est.input_spec_.negatives == 1
    z, _, value = record.steps[0]
    assert z.shape == (4, 3, 8)  # anchor, positive, one negative per row
    options = est.net_.criterion_.live_loss().options()
    expected = getattr(L, function)(z[:, 0], z[:, 1], hard_negatives=z[:, 2:],
                                    **options)
    assert value == pytest.approx(float(expected), rel=1e-5)
    assert est.transform(["thumbs up"]).shape == (1, 8)
    with pytest.raises(ValueError, match=r"hard-negative column.*SigLIP does not take"):
        ContrastiveEmbedder(**SMALL, loss="siglip").fit(TRIPLES)


def test_the_guard_leaves_duplicates_and_groups_out_of_the_loss():
    from skcontrast.losses import FalseNegativeGuard, SymmetricInfoNCE, symmetric_info_nce

    groups = np.array([0, 1, 2, 3, 4, 5, 6, 1])
    record = _Steps()
    guard = FalseNegativeGuard(same_content=True, same_group=True)
    ContrastiveEmbedder(**{**SMALL, "max_epochs": 1, "batch_size": 8},
                        loss=SymmetricInfoNCE(0.2, false_negatives=guard),
                        callbacks=[record.callback]).fit(TRIPLES, groups)
    z, index, value = record.steps[0]
    rows = index.numpy()
    texts = np.array(TRIPLES, dtype=object)[rows]
    exclude = np.zeros((8, 8), dtype=bool)  # brute force: shared texts, or one group
    for i in range(8):
        for j in range(8):
            same_text = bool({texts[i, 0], texts[i, 1]} & {texts[j, 0], texts[j, 1]})
            exclude[i, j] = i != j and (same_text or groups[rows[i]] == groups[rows[j]])
    excluded_negatives = np.array([[texts[m, 2] in (texts[i, 0], texts[i, 1])
                                    for m in range(8)] for i in range(8)])
    assert exclude.sum() == 2 and excluded_negatives.any()  # the duplicate; dog/cat faces
    expected = symmetric_info_nce(z[:, 0], z[:, 1], temperature=0.2, hard_negatives=z[:, 2:],
                                  exclude=torch.as_tensor(exclude),
                                  exclude_negatives=torch.as_tensor(excluded_negatives))
    assert value == pytest.approx(float(expected), rel=1e-5)
    with pytest.raises(ValueError, match="needs the groups: pass y"):
        ContrastiveEmbedder(**SMALL, loss=SymmetricInfoNCE(false_negatives=guard)).fit(PAIRS)
    with pytest.raises(ValueError, match="one embedding per training row"):
        ContrastiveEmbedder(**SMALL, loss=SymmetricInfoNCE(false_negatives=FalseNegativeGuard(
            guide=np.zeros((3, 4))))).fit(PAIRS)


@pytest.mark.parametrize("guide", ["self", "array"])
def test_guided_masks_equal_a_brute_force(guide):
    from skcontrast.losses import FalseNegativeGuard

    g = torch.Generator().manual_seed(0)
    u, v = torch.randn(5, 3, generator=g), torch.randn(5, 3, generator=g)
    negatives = torch.randn(5, 2, 3, generator=g)
    table = np.random.default_rng(1).normal(size=(9, 4, 3)).astype(np.float32)
    index = torch.tensor([4, 0, 7, 2, 5])
    margin = 0.1
    guard = FalseNegativeGuard(same_content=False, guide="self" if guide == "self" else table,
                               margin=margin)
    masks = guard.masks(u, v, negatives, index, None, None, share=True)

    def cos(a, b):
        return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))

    if guide == "self":
        A, P, N = u.numpy(), v.numpy(), negatives.numpy()
        limit = [cos(A[i], P[i]) + margin for i in range(5)]
    else:
        rows = table[index.numpy()]
        A, P, N = rows[:, 0], rows[:, 1], rows[:, 2:]
        limit = [cos(A[i], P[i]) - margin for i in range(5)]
    assert masks["exclude"].shape == (2, 5, 5)  # the u anchors' rules, the v anchors'
    for i in range(5):
        for j in range(5):
            assert bool(masks["exclude"][0, i, j]) == (i != j and cos(A[i], P[j]) > limit[i])
            assert bool(masks["exclude"][1, i, j]) == (i != j and cos(P[i], A[j]) > limit[i])
        pool = N.reshape(-1, 3)
        for m in range(10):
            assert bool(masks["exclude_negatives"][i, m]) == (cos(A[i], pool[m]) > limit[i])


def test_numeric_hard_negative_columns_train_the_same_loss():
    from skcontrast.datasets import make_paired_gaussians
    from skcontrast.losses import symmetric_info_nce

    X, _ = make_paired_gaussians(48, 6, random_state=0)
    negatives = X[np.random.default_rng(0).permutation(48)][:, 1:]  # other rows' views
    rows = np.concatenate([X, negatives, negatives[::-1]], axis=1)  # (48, 4, 6): k = 2
    record = _Steps()
    est = ContrastiveEmbedder(**{**SMALL, "max_epochs": 1, "batch_size": 16},
                              callbacks=[record.callback]).fit(rows)
    assert est.input_spec_.negatives == 2 and est.n_features_in_ == 12
    z, _, value = record.steps[0]
    assert z.shape == (16, 4, 8)
    expected = symmetric_info_nce(z[:, 0], z[:, 1], temperature=0.1, hard_negatives=z[:, 2:])
    assert value == pytest.approx(float(expected), rel=1e-5)
    assert est.transform(X).shape == (48, 8)  # pairs after fit; the negatives train only
    assert est.score(rows) == est.score(X)
    with pytest.raises(ValueError, match=r"\(or \(n, 2 \+ k, d\) with k hard-negative"):
        est.transform(rows[:, :3])  # not the columns of training
    plain = ContrastiveEmbedder(**{**SMALL, "max_epochs": 1}).fit(X)
    with pytest.raises(ValueError, match=r"\(or \(n, 2 \+ k, d\) with k hard-negative"):
        plain.transform(rows)  # fitted without negatives: nothing is left out silently
    bad = rows.copy()
    bad[3, 2, 0] = np.nan
    with pytest.raises(ValueError, match=r"hard-negative columns of X \(X\[:, 2:\]\)"):
        ContrastiveEmbedder(**SMALL).fit(bad)


@pytest.mark.parametrize("collide", [False, True])
def test_row_ids_are_exact_whatever_the_hash(monkeypatch, collide):
    """The duplicate keys of mining: equal rows (-0.0 equal to 0.0), equal ids, across
    arrays; with a hash made to collide ((1, 2) and (2, 1) sum to the same bits) the
    exact check falls back to sorting."""
    import skcontrast.text._mining as text

    rng = np.random.default_rng(0)
    a = np.round(rng.normal(size=(300, 2)), 0).astype(np.float32)  # many duplicates
    a[:2] = [[1.0, 2.0], [2.0, 1.0]]
    a[5], a[6] = [0.0, 3.0], [-0.0, 3.0]
    b = a[::-1].copy()
    if collide:
        class Ones:
            def integers(self, low, high, size, dtype):
                return np.zeros(size, dtype)  # weights of one: the hash sums the bits
        monkeypatch.setattr(text.np.random, "default_rng", lambda seed=None: Ones())
    ids = text._row_ids([a, b], chunk=16)
    stack = np.concatenate([a, b])
    expected = np.unique(stack, axis=0, return_inverse=True)[1].reshape(-1)
    same = ids[:, None] == ids[None, :]
    np.testing.assert_array_equal(same, expected[:, None] == expected[None, :])
    assert ids[0] != ids[1] and ids[5] == ids[6]


def test_dict_hard_negative_columns_train_the_guarded_loss(tmp_path):
    """Two modalities with sentence-transformers' column layout: keys after the first two
    are negatives of the second view's form; the content guard sees them."""
    from skcontrast.losses import FalseNegativeGuard, SymmetricInfoNCE, symmetric_info_nce

    rng = np.random.default_rng(0)
    n = 32
    X = {"image": rng.normal(size=(n, 6)).astype(np.float32),
         "text": rng.normal(size=(n, 4)).astype(np.float32)}
    X["text"][5] = X["text"][9]  # two rows share a text: false negatives of each other
    X["negative_1"] = X["text"][rng.permutation(n)]  # other rows' texts: some duplicate
    X["negative_2"] = rng.normal(size=(n, 4)).astype(np.float32)
    record = _Steps()
    guard = FalseNegativeGuard(same_content=True)
    est = ContrastiveEmbedder(**{**SMALL, "max_epochs": 1, "batch_size": n},
                              loss=SymmetricInfoNCE(0.2, false_negatives=guard),
                              callbacks=[record.callback]).fit(X)
    assert est.input_spec_.negatives == 2
    assert est.input_spec_.negative_names == ("negative_1", "negative_2")
    z, index, value = record.steps[0]
    assert z.shape == (n, 4, 8)
    rows = index.numpy()
    image, text = X["image"][rows], X["text"][rows]
    pool = np.stack([X["negative_1"][rows], X["negative_2"][rows]], 1).reshape(-1, 4)
    exclude = np.array([[i != j and (np.array_equal(image[i], image[j])
                                     or np.array_equal(text[i], text[j]))
                         for j in range(n)] for i in range(n)])
    excluded_negatives = np.array([[np.array_equal(pool[m], text[i]) for m in range(2 * n)]
                                   for i in range(n)])
    assert exclude.sum() == 2 and excluded_negatives.sum() >= n
    expected = symmetric_info_nce(z[:, 0], z[:, 1], temperature=0.2, hard_negatives=z[:, 2:],
                                  exclude=torch.as_tensor(exclude),
                                  exclude_negatives=torch.as_tensor(excluded_negatives))
    assert value == pytest.approx(float(expected), rel=1e-5)
    # after fit the negatives are accepted and left out; other keys are not
    np.testing.assert_array_equal(est.transform(X), est.transform({"image": X["image"]}))
    assert est.score(X) == est.score({"image": X["image"], "text": X["text"]})
    est.save(tmp_path / "m")
    again = skcontrast.load(tmp_path / "m")
    assert again.input_spec_.negative_names == ("negative_1", "negative_2")
    np.testing.assert_array_equal(again.transform(X), est.transform(X))
    with pytest.raises(ValueError, match=r"hard-negative columns \['negative_1', 'negative_2'\] "
                                         r"optional; got \['image', 'typo'\]"):
        est.transform({"image": X["image"], "typo": X["text"]})
    with pytest.raises(ValueError, match=r"X\['negative_3'\] \(a hard-negative column: items "
                                         r"like X\['text'\]\) has items of shape \(5,\)"):
        ContrastiveEmbedder(**SMALL).fit({**X, "negative_3": np.zeros((n, 5), np.float32)})


def test_token_id_arrays_take_hard_negative_columns():
    from skcontrast.losses import symmetric_info_nce

    ids = np.random.default_rng(0).integers(1, 50, size=(24, 5, 6))  # k = 3
    record = _Steps()
    est = ContrastiveEmbedder(**{**SMALL, "max_epochs": 1, "batch_size": 8},
                              module=torch.nn.EmbeddingBag(50, 8),
                              callbacks=[record.callback]).fit(ids)
    assert est.input_spec_.form == "array" and est.input_spec_.negatives == 3
    z, _, value = record.steps[0]
    assert z.shape == (8, 5, 8)
    expected = symmetric_info_nce(z[:, 0], z[:, 1], temperature=0.1, hard_negatives=z[:, 2:])
    assert value == pytest.approx(float(expected), rel=1e-5)
    np.testing.assert_array_equal(est.transform(ids), est.transform(ids[:, :2]))
    with pytest.raises(ValueError, match=r"\(n, 2 \+ k, \*view_shape\) with k"):
        est.transform(ids[:, :4])


@pytest.mark.parametrize("fmt", ["onnx", "torchscript"])
def test_a_text_model_exports_for_token_ids_of_any_length(tmp_path, fmt):
    if fmt == "onnx":
        ort = pytest.importorskip("onnxruntime")
    est = ContrastiveEmbedder(**SMALL).fit(PAIRS)
    path = est.export(tmp_path / ("m.onnx" if fmt == "onnx" else "m.pt"), fmt)
    texts = ["thumbs up", "a much longer text than any of the training texts, many n-grams"]
    ids = est.tokenizer_(texts)  # the exported model takes the tokenizer's ids
    assert ids.shape[1] > est.input_spec_.views[0].shape[0]
    if fmt == "onnx":
        out = ort.InferenceSession(str(path)).run(None, {"x": ids})[0]
    else:
        out = torch.jit.load(str(path))(torch.as_tensor(ids)).detach().numpy()
    np.testing.assert_allclose(out, est.transform(texts), atol=1e-5)


@pytest.mark.slow
def test_the_text_benchmark_runs_at_a_small_size():
    """``benchmarks/bench_text.py`` (mining beside the dense search; hybrid search beside
    scikit-learn's TF-IDF) keeps working; its figures are in docs/text.rst."""
    import sys
    from pathlib import Path

    pytest.importorskip("emoji")
    folder = str(Path(__file__).resolve().parents[1] / "benchmarks")
    sys.path.insert(0, folder)
    try:
        import bench_text
    finally:
        sys.path.remove(folder)
    mining = bench_text.main(["--sizes", "3000", "--dense-limit", "3000"])
    assert "3,000 x 3,000" in mining and "dense n x n matrix" in mining
    assert mining.splitlines()[-2].split()[-1] == "1.000"  # every pair found 4 negatives
    search = bench_text.main(["--search", "3000", "--queries", "60"])
    rows = search.splitlines()[3:]
    assert len(rows) == 3 and "peer: TfidfVectorizer" in rows[-1]
    recall = [float(r.split()[-1]) for r in rows]
    assert min(recall) > 0.3  # queries are their documents less a word


def test_every_text_entry_point_reads_a_table_as_the_estimators_do():
    """A DataFrame was the list of its column names: fit learned the n-grams of 'query'
    and 'document', index held one document, search answered one query, and X_val
    raised an IndexError."""
    pd = pytest.importorskip("pandas")
    from skcontrast.text import HybridRetriever, mine_hard_negatives

    frame = pd.DataFrame(PAIRS, columns=["query", "document"])
    queries, documents = frame["query"], frame[["document"]]
    by_rows = HybridRetriever(weight=1.0).fit(PAIRS).index([b for _, b in PAIRS])
    by_table = HybridRetriever(weight=1.0).fit(frame).index(documents)
    assert by_table.vectorizer_.vocabulary_ == by_rows.vectorizer_.vocabulary_
    for got, expected in zip(by_table.search(queries, k=3),
                             by_rows.search([a for a, _ in PAIRS], k=3), strict=True):
        np.testing.assert_array_equal(got, expected)
    est = ContrastiveEmbedder(**SMALL).fit(PAIRS[:6])
    held_out = pd.DataFrame(PAIRS[6:], columns=["query", "document"])
    with pytest.warns(UserWarning, match="tie"):
        tuned = HybridRetriever(est, prefit=True).fit(frame[:6], X_val=held_out)
    with pytest.warns(UserWarning, match="tie"):
        reference = HybridRetriever(est, prefit=True).fit(PAIRS[:6], X_val=PAIRS[6:])
    assert tuned.weight_scores_ == reference.weight_scores_
    with pytest.raises(ValueError, match=r"documents must be single texts \(a list of "
                                         r"strings, or a table of one text column\); got "
                                         r"columns \['query', 'document'\]"):
        by_table.index(frame)
    mined = mine_hard_negatives(queries, frame["document"], embedding=est, n_negatives=2)
    expected = mine_hard_negatives([a for a, _ in PAIRS], [b for _, b in PAIRS],
                                   embedding=est, n_negatives=2)
    np.testing.assert_array_equal(mined.indices, expected.indices)


def test_the_bag_takes_sparse_gradients_through_its_own_method_only_when_auto():
    """The estimators set ``encoder.bag.sparse`` from outside; the encoder now decides,
    and a ``sparse`` chosen at construction holds."""
    from skcontrast.text import NgramBagEncoder

    auto = NgramBagEncoder(64, 4)
    assert auto.bag.sparse is False
    assert auto.use_sparse_gradients(True) is auto and auto.bag.sparse is True
    assert auto.use_sparse_gradients(False).bag.sparse is False
    dense = NgramBagEncoder(64, 4, sparse=False).use_sparse_gradients(True)
    assert dense.bag.sparse is False
    assert NgramBagEncoder(64, 4, sparse=True).use_sparse_gradients(False).bag.sparse is True

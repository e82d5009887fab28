"""The loss module of a fit (skcontrast/_estimators/_modules.py): every batch reaches the
loss through one step, ``Loss.batch_terms``, with the guard's content ids and groups of
the batch's own rows, for training batches (with or without a memory) and held-out ones."""


import numpy as np
import pytest
import torch
from _helpers import SMALL_IMAGES, Encoder, image_pairs, paired_gaussians, small_mlp, tiny_cnn
from torch import nn

from skcontrast import ContrastiveEmbedder
from skcontrast._estimators._modules import ContrastiveCriterion
from skcontrast.datasets import (
    GaussianNoise,
    load_digit_images,
)
from skcontrast.losses import (
    FalseNegativeGuard,
    LossBatch,
    SupCon,
    SymmetricInfoNCE,
    symmetric_info_nce,
)
from skcontrast.memory import CrossBatchMemory


def _batch(seed=0, b=6, d=5):
    g = torch.Generator().manual_seed(seed)
    z = torch.nn.functional.normalize(torch.randn(b, 2, d, generator=g), dim=-1)
    z[3] = z[0]  # item 3 repeats item 0
    return z


def _expected(z, exclude, t=0.2):
    return symmetric_info_nce(z[:, 0], z[:, 1], temperature=t, exclude=exclude)


def test_the_guard_reads_the_batch_rows_own_content_in_training_and_held_out():
    z = _batch()
    train_keys = torch.arange(40).reshape(20, 2)  # no training row repeats another
    held_out_keys = torch.tensor([[0, 1], [2, 3], [4, 5], [0, 1], [6, 7], [8, 9]])
    criterion = ContrastiveCriterion(SymmetricInfoNCE(0.2, false_negatives=FalseNegativeGuard()),
                                     row_keys=train_keys, held_out_keys=held_out_keys)
    index = torch.arange(6)
    exclude = torch.zeros(6, 6, dtype=torch.bool)
    exclude[0, 3] = exclude[3, 0] = True  # rows 0 and 3 of the held-out data are alike
    held_out = criterion(z, None, index, training=False).loss
    torch.testing.assert_close(held_out, _expected(z, exclude))
    # the same rows as training rows share no content: nothing is left out (the
    # held-out rows' indices once read the training rows' ids)
    trained = criterion(z, None, index, training=True).loss
    torch.testing.assert_close(trained, _expected(z, torch.zeros(6, 6, dtype=torch.bool)))


def test_a_memory_does_not_switch_the_guard_off():
    # with a memory the batch's loss was computed without its rows: no content guard
    z = _batch(1)
    keys = torch.tensor([[0, 1], [2, 3], [4, 5], [0, 1], [6, 7], [8, 9]])
    loss = SymmetricInfoNCE(0.2, false_negatives=FalseNegativeGuard())
    with_memory = ContrastiveCriterion(loss, memory=CrossBatchMemory(12, weight=0.0),
                                       n_samples=6, row_keys=keys)
    plain = ContrastiveCriterion(loss, row_keys=keys)
    index = torch.arange(6)
    got = with_memory(z, None, index, remember=True).loss
    torch.testing.assert_close(got, plain(z, None, index).loss)
    exclude = torch.zeros(6, 6, dtype=torch.bool)
    exclude[0, 3] = exclude[3, 0] = True
    torch.testing.assert_close(got, _expected(z, exclude))


@pytest.mark.parametrize("structure", ["pairs", "single", "crops"])
def test_one_step_reads_every_structure(structure):

    g = torch.Generator().manual_seed(2)
    z = torch.randn(6, 2, 4, generator=g) if structure != "single" else torch.randn(6, 4)
    y = torch.tensor([0, 0, 1, 1, 2, 2])
    loss = SupCon(0.3) if structure != "pairs" else SymmetricInfoNCE(0.3)
    got = loss.batch_terms(LossBatch(z, structure, y if structure != "pairs" else None)).loss
    if structure == "pairs":
        expected = loss(z[:, 0], z[:, 1])
    elif structure == "crops":
        expected = loss(z.reshape(12, 4), y.repeat_interleave(2))
    else:
        expected = loss(z, y)
    torch.testing.assert_close(got, expected)
    assert np.isfinite(float(got))


def test_a_learned_temperature_has_a_gradient_down_to_its_floor():
    criterion = ContrastiveCriterion(SymmetricInfoNCE(0.07, learn_temperature=True))
    u = torch.nn.functional.normalize(torch.randn(8, 2, 5, dtype=torch.float64), dim=-1)
    (name, parameter), = criterion.named_parameters()
    with torch.no_grad():
        parameter.fill_(-12.0)  # log(t) = -12 was far below the floor, clamped, no gradient
    assert float(criterion.temperature.detach()) > 0.01
    criterion(u.float()).loss.backward()
    assert float(parameter.grad.abs()) > 0, name


SMALL = small_mlp(max_epochs=3)
pairs = paired_gaussians(120)


@pytest.fixture(scope="module")
def digits():
    images, y = load_digit_images()
    return images[:160], y[:160]


def test_projection_head_backbone_features_and_widths(pairs):
    pytest.importorskip("pandas")
    X, _ = pairs
    est = ContrastiveEmbedder(Encoder, **{**SMALL, "n_components": 6, "module__hidden": 12,
                                          "projection_head": 10,
                                          "transform_from": "backbone"}).fit(X)
    assert est.net_.module_.encoders[0].body[0].out_features == 12
    head = est.net_.module_.heads[0]
    assert (head[0].in_features, head[0].out_features, head[2].out_features) == (6, 10, 6)
    backbone, projected = est.transform(X), est.transform_head(X)
    np.testing.assert_allclose(backbone, est.transform_backbone(X))
    assert not np.allclose(np.linalg.norm(backbone, axis=1), 1)  # raw features
    np.testing.assert_allclose(np.linalg.norm(projected, axis=1), 1, rtol=1e-5)
    wide = ContrastiveEmbedder(nn.Linear(8, 20), **{**SMALL, "projection_head": "mlp",
                                                    "transform_from": "backbone"}).fit(X)
    assert wide.n_components_ == 20 and len(wide.get_feature_names_out()) == 20
    frame = wide.set_output(transform="pandas").transform(X)
    assert frame.shape == (120, 20)
    assert wide.transform_head(X).shape == (120, 4)  # its own column names


def test_freezing_keeps_weights_and_batch_norm_statistics(pairs):
    X, _ = pairs
    pretrained = Encoder(8, 4)
    before = {k: v.clone() for k, v in pretrained.state_dict().items()}
    est = ContrastiveEmbedder(pretrained, **{**SMALL, "projection_head": "mlp",
                                             "freeze": ["body"]}).fit(X)
    after = est.net_.module_.encoders[0].state_dict()
    for name in ("body.0.weight", "body.1.running_mean", "body.1.running_var"):
        torch.testing.assert_close(after[name], before[name])  # weights and statistics
    assert not torch.equal(after["out.weight"], before["out.weight"])
    probe = ContrastiveEmbedder(pretrained, **{**SMALL, "projection_head": 8,
                                               "freeze": "backbone"}).fit(X)
    for name, value in probe.net_.module_.encoders[0].state_dict().items():
        torch.testing.assert_close(value, before[name])
    with pytest.raises(ValueError, match=r"freeze names 'layer9'.*parts are"):
        ContrastiveEmbedder(pretrained, **{**SMALL, "freeze": ["layer9"]}).fit(X)


def test_a_randomly_initialised_timm_model_trains_on_images(digits):
    """timm needs torchvision, and this project's package index has no CPU build of it
    (see the README): the test runs where both are installed."""
    pytest.importorskip("torchvision", reason="timm needs a torchvision matching torch; "
                                              "none is installable here")
    timm = pytest.importorskip("timm")
    images, _ = digits

    def resnet(n_in, n_out):
        body = timm.create_model("resnet10t", pretrained=False, in_chans=1, num_classes=0)
        return nn.Sequential(body, nn.Linear(body.num_features, n_out))

    est = ContrastiveEmbedder(module=resnet, augmentation=GaussianNoise(0.1), **SMALL)
    assert est.fit(images).transform(images).shape == (160, 4)


def test_a_transformers_text_encoder_takes_its_view_as_keyword_arguments():
    transformers = pytest.importorskip("transformers")
    rng = np.random.default_rng(0)
    ids = rng.integers(1, 30, size=(64, 8))
    mask = (np.arange(8) < rng.integers(3, 9, size=64)[:, None]).astype(np.int64)
    config = transformers.BertConfig(vocab_size=30, hidden_size=16, num_hidden_layers=1,
                                     num_attention_heads=2, intermediate_size=32,
                                     max_position_embeddings=8)

    class Pooled(nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = transformers.BertModel(config)

        def forward(self, input_ids, attention_mask):
            return self.bert(input_ids=input_ids,
                             attention_mask=attention_mask).last_hidden_state[:, 0]

    pairs = {"a": {"input_ids": ids, "attention_mask": mask},
             "b": {"input_ids": ids[:, ::-1].copy(), "attention_mask": mask[:, ::-1].copy()}}
    est = ContrastiveEmbedder(module=Pooled(), **{**SMALL, "micro_batch_size": 8}).fit(pairs)
    assert len(est.net_.module_.encoders) == 1  # alike views share the encoder
    assert est.transform(pairs).shape == (64, 16)
    assert est.transform_view(pairs["b"], view="b").shape == (64, 16)


def test_image_pairs_reach_a_cnn_whole(digit_images):
    images, _, _ = digit_images
    X = image_pairs(images)
    seen = []

    class Spy(nn.Module):
        def __init__(self):
            super().__init__()
            self.cnn = tiny_cnn()

        def forward(self, x):
            seen.append(tuple(x.shape[1:]))
            return self.cnn(x)

    est = ContrastiveEmbedder(module=Spy(), **SMALL_IMAGES).fit(X)
    assert set(seen) == {(1, 8, 8)}
    assert est.transform(X).shape == (96, 4)
    U, V = est.transform_pairs(X)
    np.testing.assert_allclose(est.transform_view(X[:, 1], view=1), V, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(U, axis=1), 1, rtol=1e-5)
    assert not hasattr(est, "n_features_in_") and est.view_split_ is None
    assert 0 <= est.score(X) <= 1
    with pytest.raises(ValueError, match=r"items of shape \(1, 8, 9\), but the estimator was "
                                         r"fitted on view 0 \(float, shape \(1, 8, 8\)\)"):
        est.transform(np.zeros((4, 2, 1, 8, 9), dtype=np.float32))
    with pytest.raises(ValueError, match=r"X_view for view 1 must have shape \(n, 1, 8, 8\)"):
        est.transform_view(X[:, 1, 0], view=1)


def test_default_module_flattens_nd_float_views(digit_images):
    images, _, _ = digit_images
    est = ContrastiveEmbedder(hidden_layer_sizes=(8,), **SMALL_IMAGES).fit(image_pairs(images))
    encoder = est.net_.module_.encoders[0]
    assert isinstance(encoder[0], nn.Flatten) and encoder[1][0].in_features == 64


def test_kornia_augmentations_on_a_factory_built_cnn_are_reproducible(digit_images):
    """kornia draws from torch's global generator, which fit seeds (in a forked state);
    a module factory is built after seeding, so the whole fit is reproducible."""
    pytest.importorskip("kornia")
    from skcontrast.datasets import digit_augmentation, digit_cnn

    images, _, _ = digit_images
    fits = [ContrastiveEmbedder(module=digit_cnn, augmentation=digit_augmentation(),
                                **SMALL_IMAGES).fit(images) for _ in range(2)]
    np.testing.assert_array_equal(fits[0].transform(images), fits[1].transform(images))


@pytest.mark.parametrize("shared", [True, False])
def test_each_encoder_embeds_its_views_and_the_hard_negatives_in_one_call(shared):
    """Pairs with hard negatives ``(x0, x1, negatives)``: the views' and negatives'
    embeddings are each encoder's of each row, in ``(B, 2 + m, k)``, and the encoder
    that embeds view 1 is called once for its view and the negatives (a shared one once
    for everything)."""
    from skcontrast._estimators._modules import ViewEncoders

    torch.manual_seed(0)
    first, second = nn.Linear(5, 3), nn.Linear(5, 3)
    calls = []
    for encoder in (first, second):
        encoder.register_forward_hook(lambda m, i, o: calls.append(len(i[0])))
    encoders = ViewEncoders([first] if shared else [first, second])
    x0, x1, negatives = torch.randn(4, 5), torch.randn(4, 5), torch.randn(4, 2, 5)
    out = encoders((x0, x1, negatives))
    side = first if shared else second
    expected = torch.cat([first(x0)[:, None], side(x1)[:, None], side(negatives)], dim=1)
    calls_made = calls[:-3]  # the expected's own three
    torch.testing.assert_close(out, expected)
    assert calls_made == ([4 + 4 + 8] if shared else [4 + 8, 4])

"""Experiment logging: skorch's TensorBoard callback records every history key the
estimators add (issue 28)."""

import importlib.util

import pytest

from skcontrast import ContrastiveEmbedder
from skcontrast.datasets import make_paired_gaussians
from skcontrast.selectors import OSGDSelector


@pytest.mark.skipif(importlib.util.find_spec("tensorboard") is None,
                    reason="needs tensorboard (pip install tensorboard)")
def test_tensorboard_logs_the_losses_the_held_out_values_and_the_selection_time(tmp_path):
    from skorch.callbacks import TensorBoard
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from torch.utils.tensorboard import SummaryWriter

    X, y = make_paired_gaussians(64, 6, n_clusters=4, random_state=0)
    ContrastiveEmbedder(n_components=4, hidden_layer_sizes=(8,), max_epochs=3,
                        validation_fraction=0.25, scoring="map@r", device="cpu",
                        selector=OSGDSelector(8, k=2, q=2), random_state=0,
                        callbacks=[TensorBoard(SummaryWriter(str(tmp_path)))]).fit(X, y)
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    for key in ("train_loss", "train_positive", "train_entropy", "valid_loss", "valid_score",
                "select_time", "n_batches"):
        assert any(tag.endswith(key) for tag in tags), (key, tags)
    steps = [e.step for e in events.Scalars(next(t for t in tags if t.endswith("train_loss")))]
    assert len(steps) == 3

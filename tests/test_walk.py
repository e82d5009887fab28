"""Tests of ``skcontrast.selectors._walk``: ProSampler's random-walk batches against a
seed-for-seed plain-loop version of their definition."""

import numpy as np
import pytest
from _helpers import clustered_data, random_data

from skcontrast.selectors import (
    RandomWalkBatchSelector,
    ShuffledBatchSelector,
)
from skcontrast.selectors._graph import (
    candidate_graph,
    unit_rows,
)
from skcontrast.selectors._walk import PATIENCE, batch_sizes, walk_batches

B = 16


def reference_walks(graph, sizes, restart, rng):
    """Seed-for-seed plain-loop version of walk_batches' definition."""
    n, k = graph.shape
    owner = {}
    starts = list(rng.permutation(n)[:len(sizes)])
    batches = [[s] for s in starts]
    for w, s in enumerate(starts):
        owner[s] = w
    current, stall = list(starts), [0] * len(sizes)
    while True:
        active = [w for w in range(len(sizes)) if len(batches[w]) < sizes[w]]
        if not active:
            return batches
        back = rng.random(len(active)) < restart
        slot = rng.integers(k, size=len(active))
        for j, w in enumerate(active):
            current[w] = starts[w] if back[j] else graph[current[w], slot[j]]
            stall[w] += 1
            if current[w] not in owner:
                owner[current[w]] = w
                batches[w].append(current[w])
                stall[w] = 0
        stuck = [w for w in active if stall[w] >= PATIENCE and len(batches[w]) < sizes[w]]
        if stuck:
            unclaimed = np.array([i for i in range(n) if i not in owner])
            stuck = stuck[:len(unclaimed)]
            jump = rng.choice(unclaimed, size=len(stuck), replace=False)
            for w, node in zip(stuck, jump, strict=True):
                owner[node] = w
                batches[w].append(node)
                starts[w] = current[w] = node
                stall[w] = 0


@pytest.mark.parametrize("restart", [0.0, 0.3, 0.9])
def test_walks_match_the_plain_loop_definition(restart):
    X, _ = random_data(150)
    graph = candidate_graph(unit_rows(X), 40, 6, np.random.default_rng(0))
    sizes = batch_sizes(150, 16, False)
    got = walk_batches(graph, sizes, restart, np.random.default_rng(7))
    want = reference_walks(graph, sizes, restart, np.random.default_rng(7))
    assert [list(b) for b in got] == [list(b) for b in want]


def test_walk_batches_are_graph_neighbourhoods():
    X, y = clustered_data(600)
    sel = RandomWalkBatchSelector(batch_size=B, n_candidates=200, n_neighbours=10,
                                  restart=0.5, random_state=0)
    walk = np.mean([len(np.unique(y[b])) for b in sel.split(X)])
    shuffled = np.mean([len(np.unique(y[b]))
                        for b in ShuffledBatchSelector(batch_size=B, random_state=0).split(X)])
    assert walk < shuffled - 1  # walks stay among similar samples

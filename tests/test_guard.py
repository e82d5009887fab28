"""Tests of ``skcontrast.losses._guard``: the false-negative guard's content ids, one rule
for every input form, exact for every value."""

import numpy as np
import pytest
import torch

from skcontrast.losses import FalseNegativeGuard


def assert_ids_follow(ids, contents):
    """Equal ids exactly where the brute-force ``contents`` (one hashable per entry of
    the ``(n, c)`` table, compared with Python's ``==``) are equal."""
    ids = np.asarray(ids)
    flat = [contents[i][c] for i in range(ids.shape[0]) for c in range(ids.shape[1])]
    for a, left in enumerate(flat):
        for b, right in enumerate(flat):
            assert (ids.flat[a] == ids.flat[b]) == (left == right), (left, right)


@pytest.mark.parametrize("container", [list, tuple, lambda t: np.array(t, dtype=object)])
def test_strings_differ_by_a_trailing_nul(container):
    # numpy's '<U' dtype drops trailing NULs: 'abc' and 'abc\x00' got one id
    anchors = ["abc", "abc\x00", "abc", "\x00abc", "abc\x00\x00"]
    positives = ["abc\x00", "abc", "x", "abc\x00\x00", "abc"]
    ids = FalseNegativeGuard.content_ids([container(anchors), container(positives)])
    assert_ids_follow(ids, list(zip(anchors, positives, strict=True)))
    assert ids[0, 0] != ids[1, 0] and ids[0, 0] == ids[1, 1]


BIG = 2**53  # the first integer whose successor float64 rounds to it


def _integer_forms(rows):
    """One column of int64 rows (lists of ints) in every form ``content_ids`` reads, with
    each form's content as the brute force sees it."""
    width = max(len(r) for r in rows)
    padded = torch.tensor([r + [0] * (width - len(r)) for r in rows])
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    left = torch.tensor([[0] * (width - len(r)) + r for r in rows])  # padded on the left
    left_mask = mask.flip(1)
    offsets = torch.tensor(np.cumsum([0] + [len(r) for r in rows[:-1]]))
    flat = torch.tensor([x for r in rows for x in r])
    same = [tuple(r) for r in rows]
    return {
        "array": (padded.numpy(), [tuple(r) for r in padded.tolist()]),
        "tensor": (padded, [tuple(r) for r in padded.tolist()]),
        "input_ids alone": ({"input_ids": padded}, [tuple(r) for r in padded.tolist()]),
        "input_ids + mask": ({"input_ids": padded, "attention_mask": mask}, same),
        "left-padded + mask": ({"input_ids": left, "attention_mask": left_mask}, same),
        "flat + offsets": ({"input_ids": flat, "offsets": offsets}, same),
        "dict of views": ({"ids": padded, "weight": padded.double()},
                          [(tuple(r), tuple(float(x) for x in r))
                           for r in padded.tolist()]),
    }


@pytest.mark.parametrize("form", list(_integer_forms([[1]])))
def test_int64_content_is_compared_exactly_in_every_form(form):
    # a dict of views cast every view to float64: 2**53 and 2**53 + 1 got one id
    anchors = [[BIG, 7], [BIG + 1, 7], [BIG, 7], [5]]
    positives = [[BIG + 1, 7], [BIG, 7], [5], [BIG, 7]]
    a, a_content = _integer_forms(anchors)[form]
    p, p_content = _integer_forms(positives)[form]
    ids = FalseNegativeGuard.content_ids([a, p])
    assert_ids_follow(ids, list(zip(a_content, p_content, strict=True)))
    assert ids[0, 0] != ids[1, 0]  # a dict of views: by its int64 view


def test_a_dict_of_views_compares_each_view_by_its_own_dtype_and_name():
    big = torch.tensor([[BIG], [BIG + 1], [BIG]])
    floats = torch.tensor([[0.5], [0.5], [-0.0]], dtype=torch.float32)
    views = {"ids": big, "x": floats}
    ids = FalseNegativeGuard.content_ids([views, {"x": floats + 0.0, "ids": big},
                                          {"other": big, "x": floats}])
    # rows 0 and 1 differ in their int64 view only; -0.0 reads as 0.0; key order does not
    # matter, key names do
    assert ids[0, 0] != ids[1, 0] and ids[0, 0] != ids[2, 0]
    assert ids[:, 0].tolist() == ids[:, 1].tolist()
    assert not set(ids[:, 2].tolist()) & set(ids[:, 0].tolist())
    # strings inside a dict, beside int64 ids
    texts = ["abc", "abc\x00", "abc", "abc"]
    numbers = [BIG, BIG, BIG, BIG + 1]
    ids = FalseNegativeGuard.content_ids([{"text": texts, "id": torch.tensor(numbers)}])
    assert_ids_follow(ids, [[row] for row in zip(texts, numbers, strict=True)])


def test_token_rows_of_other_lengths_never_collide_whatever_their_values():
    # a token id of -1 (the padding the rows are stored with) or trailing ids that equal
    # the padding do not make rows of two lengths equal
    column = {"input_ids": torch.tensor([[4, -1], [4, 0]]),
              "attention_mask": torch.tensor([[1, 1], [1, 0]])}
    other = {"input_ids": torch.tensor([[4], [4]]), "attention_mask": torch.tensor([[1], [1]])}
    ids = FalseNegativeGuard.content_ids([column, other])
    assert ids[0, 0] != ids[0, 1] and ids[1, 0] == ids[1, 1]


def test_a_dict_whose_views_disagree_on_the_items_is_refused_naming_them():
    with pytest.raises(ValueError, match=r"the views of a content column \(a dict\) must "
                                         r"hold one entry per item each; got \{'a': 3, "
                                         r"'b': 2\}"):
        FalseNegativeGuard.content_ids([{"a": np.zeros((3, 1)), "b": np.zeros((2, 1))}])
    with pytest.raises(ValueError, match="got no view"):
        FalseNegativeGuard.content_ids([{}])

"""Searching the balance of contrastive losses (seed 001).

:class:`BalanceSearchCV` is a scikit-learn search (like ``GridSearchCV``) that tunes
``(lambda_pos, lambda_ent, batch_size)`` by coordinate descent along the reparameterised
directions of seed 001, Eq. 9-10.
"""

from ._balance import BALANCE_DIRECTIONS, BalanceSearchCV

__all__ = ["BALANCE_DIRECTIONS", "BalanceSearchCV"]

"""Searching the balance of contrastive losses (Sors et al. 2021, arXiv:2112.11743).

:class:`BalanceSearchCV` is a scikit-learn search (like ``GridSearchCV``) that tunes
``(lambda_pos, lambda_ent, batch_size)`` by coordinate descent along the reparameterised
directions of Sors et al. 2021, Eq. 9-10. :func:`balance_searches` and :func:`search_curves`
compare it with grid and random search at equal budget (Sors et al. 2021, Table 1).
:func:`check_search_input` checks, before any fitting, what a ``GridSearchCV`` would
discover fold by fold (a plain dict of views, scorers the estimator cannot serve).
"""

from ._balance import BALANCE_DIRECTIONS, BalanceSearchCV, check_search_input
from ._compare import SearchCurves, balance_searches, best_levels, search_curves

__all__ = ["BALANCE_DIRECTIONS", "BalanceSearchCV", "SearchCurves", "balance_searches",
           "best_levels", "check_search_input", "search_curves"]

"""What a batch's loss remembers from earlier batches.

Batch selectors decide *which* samples meet in a mini-batch; a memory decides *how much*
of the data one step's loss sees beyond its batch. Pass one as ``memory=`` to
:class:`~skcontrast.ContrastiveEmbedder` or :class:`~skcontrast.SupConEmbedder`, or to
:func:`skcontrast.simulation.optimize_embeddings`.

==========================  ===============================================================
:class:`SogCLRMemory`       SogCLR's per-sample moving average of the negative term
                            (Yuan et al. 2022; the "SogCLR objective" of Cho et al. 2023,
                            arXiv:2307.05906, Sec. 6.2)
:class:`CrossBatchMemory`   XBM, a FIFO queue of detached embeddings from earlier batches
                            (Wang et al. 2020; Sors et al. 2021, arXiv:2112.11743, App. E)
==========================  ===============================================================

A memory holds only its parameters (``clone``, ``get_params``, ``GridSearchCV`` over
``memory__gamma``); the training set's state is built in ``fit`` and lives inside the
fitted net: it is pickled (and device-mapped) with it, kept by ``warm_start``, saved by
:class:`~skcontrast.AcceleratorCheckpoint`, and identical on every process in
data-parallel training, where it is updated from the gathered global batch.
"""

from ._base import BaseMemory, MemoryState
from ._sogclr import SogCLRMemory
from ._xbm import CrossBatchMemory

__all__ = ["BaseMemory", "CrossBatchMemory", "MemoryState", "SogCLRMemory"]

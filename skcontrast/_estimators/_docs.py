"""The parameters the two estimators share, documented once.

Each estimator's class docstring names them on a line ``{shared: name name ...}``,
which :func:`shared_parameters` replaces with their entries (``{estimator}`` becomes
the class name), so a change to a shared parameter is written in one place.
"""

from __future__ import annotations

import re
from typing import Any

PARAMETERS: dict[str, str] = {
    'tokenizer': """\
tokenizer : callable, Hugging Face tokenizer or None, default=None
    For text (strings): ``tokenizer(list_of_str) -> (n, L)`` integer token ids
    (0 is padding), or a Hugging Face tokenizer (its ``input_ids`` and
    ``attention_mask``). ``None``: :class:`~skcontrast.text.HashingNgramTokenizer`
    (hashed character 2-4-grams and words, no download). A text view's default
    encoder is :class:`~skcontrast.text.NgramBagEncoder` over the ids, sized by the
    tokenizer's ``vocabulary_size`` (a Hugging Face tokenizer's ``len``).""",
    'n_components': """\
n_components : int or 'auto', default='auto'
    Embedding dimension. ``'auto'``: 256 when a view is text (the width at which the
    default text encoder's lexical prior is close to TF-IDF's cosine), 96 for single
    images (the default image encoder's pixel prior of 64 beside 32 learned), else
    32.""",
    'hidden_layer_sizes': """\
hidden_layer_sizes : tuple of int or 'auto', default='auto'
    Hidden widths of the default encoder. ``'auto'``: ``(128,)`` for the MLP of a
    view of numbers; ``()`` for a text view's bag (fastText's linear model, which
    starts as a random projection of the texts' n-gram sets, a lexical prior:
    :class:`~skcontrast.text.NgramBagEncoder`).""",
    'batch_size': """\
batch_size : int or None, default=None
    ``None`` uses the selector's batch size. An int overrides it; the estimator
    works on a clone of the selector, never on the user's object. Both
    ``batch_size`` and ``selector__batch_size`` can be tuned by ``GridSearchCV``.""",
    'selector': """\
selector : BatchSelector or None, default=None
    Which samples share a batch; ``None`` is ``ShuffledBatchSelector(min(64, n))``. Adaptive
    selectors whose ``loss`` is ``None`` score with the loss being trained, with its
    learned temperature of that epoch.""",
    'memory': """\
memory : SogCLRMemory, CrossBatchMemory or None, default=None
    What each training batch's loss remembers from earlier batches
    (:mod:`skcontrast.memory`): SogCLR's moving-average estimate of every sample's
    negative term, or a cross-batch queue of embeddings (XBM). Its state is built
    in ``fit`` from the dataset indices of the batches, lives with the fitted net
    (pickled with it, kept by ``warm_start`` on the same training set, started
    afresh by a new ``fit`` or a ``clone``); the user's object is never changed.
    Tunable by ``GridSearchCV`` as ``memory__gamma``, ``memory__size``, ...""",
    'max_epochs': """\
max_epochs : int, default=20""",
    'lr': """\
lr : float, default=1e-3""",
    'lr_schedule': """\
lr_schedule : WarmupCosine or None, default=None
    A learning-rate schedule stepped every batch: :class:`~skcontrast.WarmupCosine`
    (linear warm-up, then cosine decay over ``max_epochs``, as SimCLR and Cho et
    al. 2023's protocol). ``None`` keeps ``lr`` constant.""",
    'validation_fraction': """\
validation_fraction : float in (0, 1) or None, default=None
    Hold this share of ``X`` out of training (stratified by class for labels), as
    scikit-learn's ``MLPClassifier`` does; or pass ``X_val`` to ``fit``. Every epoch
    then records ``valid_loss`` (the same loss at the same batch size, on the same
    held-out batches, without gradients, memory or augmentation randomness that
    changes), so skorch's ``EarlyStopping``, ``Checkpoint`` and
    ``LRScheduler('ReduceLROnPlateau')`` work with their defaults. Held-out rows never
    reach the selector or the memory.""",
    'scoring': """\
scoring : str or callable or None, default=None
    With held-out data, also record ``valid_score`` each epoch: a scorer of
    :func:`skcontrast.metrics.get_scorer` by name, or any ``scorer(estimator, X,
    y)`` (greater is better; ``valid_score_best`` marks the best epoch).""",
    'optimizer': """\
optimizer : {'adam', 'adamw', 'sgd'} or torch.optim.Optimizer class, default='adam'""",
    'optimizer_params': """\
optimizer_params : dict or None, default=None
    E.g. ``{'weight_decay': 1e-4}``.""",
    'precision': """\
precision : {'float32', 'bfloat16', 'float16'}, default='float32'
    Mixed precision: forward passes run under ``torch.autocast`` in this dtype (with
    a gradient scaler for float16); the loss is computed in float32.""",
    'num_workers': """\
num_workers : int, default=0
    DataLoader worker processes loading the items of a Dataset (array rows are
    gathered a whole batch at a time in the main process). Memory is pinned on CUDA.""",
    'data_on_device': """\
data_on_device : {False, True, 'auto'}, default=False
    Hold array training data whole on the training GPU, so that no batch is copied
    from the host; ``'auto'`` does so when it takes at most half the free GPU
    memory. The adaptive selectors' embedding pass always goes batch by batch.""",
    'image_normalization': """\
image_normalization : (mean, std) or None, default=None
    uint8 images (views of dtype uint8) stay bytes on the host and become floats in
    [0, 1] on the training device, batch by batch, so no float copy of the data set
    is made; with ``(mean, std)`` (one value or one per channel, channel axis 1) they
    are then standardised, e.g. ImageNet's ``((0.485, 0.456, 0.406), (0.229, 0.224,
    0.225))``. Float views are cast to float32 on the device the same way, and
    standardised with ``(mean, std)`` too; integer views (token ids) never are.""",
    'micro_batch_size': """\
micro_batch_size : int or None, default=None
    Gradient caching (GradCache, Gao et al. 2021): embed each selected batch this
    many items at a time, take the loss and its gradient on the whole batch, then
    back-propagate each micro-batch with its cached gradient. The update equals
    the plain one on the same batch (up to rounding; batch normalisation excepted,
    with a warning), at the cost of one more forward pass, while the encoder only
    ever holds the activations of one micro-batch: batches of thousands (up to the
    full batch) train a real network. Tiled losses (the loss's ``chunk_size``,
    ``'auto'`` by default) keep the batch's B x B similarities small too.""",
    'selection_pass': """\
selection_pass : {'fresh', 'cached'} or int, default='fresh'
    What adaptive selectors see at the start of each epoch (the estimator's
    :class:`~skcontrast.selectors.SelectorSampler` takes this very setting). ``'fresh'``:
    a no-grad pass over the whole training set in inference mode. An int ``k``: such a
    pass every ``k`` epochs, and between them the embeddings the training steps
    computed (or the last pass's). ``'cached'``: every training
    sample's embedding as the training step that last trained it computed it (kept
    on the device, O(n k) memory), so selection costs no extra pass over the data
    (a CNN's spectral fit: 1.06x a shuffled fit instead of 1.45x); but those
    embeddings are up to an epoch old and computed in training mode, and measured
    on a CNN the batches picked from them were clearly less hard on the current
    embeddings (see the user guide, "Selectors"). The first epoch, and samples no
    step has embedded yet, take a fresh pass. A curating selector
    (:class:`~skcontrast.selectors.JESTSelector`, ...) whose own ``selection_pass``
    is ``None`` follows this one: ``'cached'`` scores each super-batch with the rows'
    embeddings from their last training step (and a reference model's, computed
    once per row) instead of embedding it at every step.""",
    'accelerator': """\
accelerator : accelerate.Accelerator or None, default=None
    Data-parallel training on several processes, GPUs or nodes (launch the script
    with ``accelerate launch`` or ``torchrun``). The global batch stays the
    selector's batch: every process trains on its slice of it and the embeddings
    are gathered, so the loss and the update are those of the whole batch (see the
    user guide, "Scaling out"). Mixed precision is then the accelerator's
    (``Accelerator(mixed_precision='bf16')``) and ``device`` is ignored. Not
    pickled: ``None`` after unpickling.""",
    'device': """\
device : {'auto', 'cpu', 'cuda', 'cuda:N', 'mps'}, default='auto'
    ``'auto'``: a CUDA GPU when one is usable, else the CPU. A device that is
    asked for but missing is a clear error.""",
    'random_state': """\
random_state : int or None, default=None
    Seeds the module, the selector (when it has none) and the augmentations;
    fitting is then reproducible on the CPU.""",
    'verbose': """\
verbose : int, default=0
    1 shows a progress bar per epoch and skorch's table (loss, duration, selection
    time).""",
    'callbacks': """\
callbacks : list or None, default=None
    Extra skorch callbacks.""",
    'warm_start': """\
warm_start : bool, default=False
    Continue training the fitted network on the next ``fit``.""",
    'projection_head': """\
projection_head : None, 'mlp', int or nn.Module, default=None
    A projection head on top of ``module`` (SimCLR, Chen et al. 2020): ``'mlp'`` is
    SimCLR's two-layer head (Linear(w, w), ReLU, Linear(w, n_components), ``w`` the
    module's output width), an int the same with that hidden width, a module is
    used as given. The loss sees the head's output; the representation *before* the
    head is usually the better one for downstream tasks (``transform_from``).""",
    'transform_from': """\
transform_from : {'head', 'backbone'}, default='head'
    What :meth:`transform` (and so a ``Pipeline``) returns: the head's unit-norm
    embeddings, or the module's own features as they are.
    :meth:`~skcontrast.{estimator}.transform_head` and
    :meth:`~skcontrast.{estimator}.transform_backbone` give either; ``score``
    always uses the head.
    ``n_components_`` and the feature names follow the width of that output.""",
    'freeze': """\
freeze : None, 'backbone' or list of str, default=None
    Parts of a (pretrained) module to keep fixed: their parameters do not train and
    they stay in eval mode, so their batch-norm statistics do not drift.
    ``'backbone'`` freezes the whole module (only a projection head trains: a
    linear or MLP probe); a list names submodules of the module (e.g.
    ``['conv1', 'layer1']``, names as in ``module.named_modules()``).""",
    '**kwargs': """\
**kwargs : ``module__*`` and ``optimizer__*``
    skorch-style nested parameters: ``module__*`` go to a module class or factory
    (a class whose ``__init__`` takes ``n_in``/``n_out`` receives the input size
    and ``n_components`` unless given), ``optimizer__*`` to the optimizer (e.g.
    ``optimizer__weight_decay=1e-4``, or per-group rates with
    ``optimizer__param_groups=[('heads.*', {'lr': 1e-2})]``, names as in the
    fitted ``net_.module_``). Both can be tuned by ``GridSearchCV``.""",
}


def shared_parameters(cls: Any) -> Any:
    """Class decorator: expand each ``{shared: ...}`` line of ``cls.__doc__`` into the
    entries of :data:`PARAMETERS` it names, at that line's indentation."""

    def expand(match: re.Match) -> str:
        indent = match.group(1)
        names = match.group(2).split()
        unknown = [n for n in names if n not in PARAMETERS]
        if unknown:
            raise KeyError(f"{cls.__name__}'s docstring names unknown shared parameters "
                           f"{unknown}")
        text = "\n".join(PARAMETERS[n] for n in names).replace("{estimator}", cls.__name__)
        return "\n".join(indent + line if line else line for line in text.split("\n"))

    if cls.__doc__:
        cls.__doc__ = re.sub(r"(?m)^( *)\{shared: ([^}]*)\}$", expand, cls.__doc__)
    return cls

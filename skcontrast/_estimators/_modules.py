"""Torch modules the estimators train: view encoders and the contrastive criterion."""

from __future__ import annotations

import copy
import inspect
import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import torch
from torch import nn

from .._validation import describe
from ..losses import MIN_LEARNED_TEMPERATURE, Loss, LossBatch, LossTerms
from ._data import View
from ._progress import SelectionProgress


def make_mlp(n_in: int, hidden_layer_sizes: Sequence[int], n_out: int) -> nn.Sequential:
    """``Linear -> ReLU`` for each hidden width, then a linear projection to ``n_out``."""
    layers: list[nn.Module] = []
    for width in hidden_layer_sizes:
        layers += [nn.Linear(n_in, width), nn.ReLU()]
        n_in = width
    layers.append(nn.Linear(n_in, n_out))
    return nn.Sequential(*layers)


def _instantiate(module: Any, n_in: int, n_out: int, kwargs: dict | None = None) -> nn.Module:
    """One encoder from what ``module`` says: an instance (copied), a class (called with
    ``kwargs``, the ``module__*`` parameters, and with ``n_in``/``n_out`` when its
    ``__init__`` takes them and they are not given) or a factory ``f(n_in, n_out,
    **kwargs)``."""
    kwargs = dict(kwargs or {})
    if isinstance(module, nn.Module):
        if kwargs:
            raise ValueError(f"module__* parameters ({', '.join(kwargs)}) go to a module "
                             f"class or factory, but module is an instance of "
                             f"{type(module).__name__}; pass the class instead")
        return copy.deepcopy(module)
    if isinstance(module, type) and issubclass(module, nn.Module):
        accepted = inspect.signature(module).parameters
        for name, value in (("n_in", n_in), ("n_out", n_out)):
            if name in accepted and name not in kwargs:
                kwargs[name] = value
        return module(**kwargs)
    if callable(module):
        return module(n_in, n_out, **kwargs)
    raise ValueError(f"module must be an nn.Module, an nn.Module class, or a factory "
                     f"f(n_in, n_out); got {describe(module)}")


#: ``n_components='auto'``: the output width with a text view (where the text bag's
#: lexical prior approximates TF-IDF's cosine closely), images 96 (a pixel prior of 64
#: beside 32 learned, as measured in docs/images.rst), and the others
TEXT_WIDTH, IMAGE_WIDTH, WIDTH = 256, 96, 32
#: ``hidden_layer_sizes='auto'``: a text view's bag is linear, other views get an MLP
TEXT_HIDDEN, HIDDEN = (), (128,)
#: the default encoders that take ``module__*`` options, by the kind of input
#: (:func:`input_kind`): their name in messages and the options they take
ENCODER_OPTIONS = {"text": ("text encoder (NgramBagEncoder)", ("weighting", "sparse")),
                   "image": ("image encoder (ImageEncoder)",
                             ("width", "prior_width", "mix", "seed"))}


def input_kind(views: Sequence[View]) -> str:
    """What chooses the defaults (``n_components='auto'``, the default encoder's
    options): ``'text'`` when a view is text, else ``'image'`` when a view is single
    images, else ``'features'``."""
    if any(view.text for view in views):
        return "text"
    return "image" if any(view.image for view in views) else "features"


def embedding_width(n_components: Any, views: Sequence[View]) -> int:
    """``n_components``, with ``'auto'`` resolved for ``views``."""
    if n_components != "auto":
        return int(n_components)
    return {"text": TEXT_WIDTH, "image": IMAGE_WIDTH}.get(input_kind(views), WIDTH)


def default_encoder(view: View, hidden_layer_sizes: Sequence[int] | str,
                    n_out: int, options: dict | None = None) -> nn.Module:
    """The MLP for one view; N-D views are flattened first. A text view gets a bag of
    its token ids (:class:`~skcontrast.text.NgramBagEncoder`, ``hidden_layer_sizes``
    its widths); other integer views are refused. ``hidden_layer_sizes='auto'``: none
    for a text view, one layer of 128 for the others. ``options`` (``module__*``) go to
    a text view's bag."""
    if view.text:
        from ..text import NgramBagEncoder

        assert view.vocabulary is not None
        text_hidden = TEXT_HIDDEN if isinstance(hidden_layer_sizes, str) \
            else hidden_layer_sizes
        return NgramBagEncoder(view.vocabulary, n_out, text_hidden, **(options or {}))
    if view.image:
        from ..images import ImageEncoder

        return ImageEncoder(view.shape, n_out, **(options or {}))
    hidden = HIDDEN if isinstance(hidden_layer_sizes, str) else hidden_layer_sizes
    if view.parts:
        raise ValueError(f"{view.describe()} goes to its encoder as keyword arguments; pass "
                         "an encoder for it (module={name: encoder, ...})")
    if view.integer:
        raise ValueError(
            f"{view.describe()} holds integers (e.g. token ids), and the default MLP "
            f"encoder takes real values: pass an encoder for it, e.g. module={{..., "
            f"{view.name!r}: nn.EmbeddingBag(vocab_size, {n_out})}} or module=(enc0, enc1), "
            "or convert the view to float if its integers are measurements (text from a "
            "tokenizer of your own gets the default bag encoder when the tokenizer has a "
            "vocabulary_size attribute)")
    mlp = make_mlp(view.size, hidden, n_out)
    return nn.Sequential(nn.Flatten(), mlp) if len(view.shape) > 1 else mlp


def _blank(view: View) -> Any:
    if view.parts:
        return {p.name: _blank(p) for p in view.parts}
    return torch.zeros((2, *view.shape), dtype=torch.long if view.integer else torch.float32)


def call_encoder(encoder: nn.Module, x: Any) -> torch.Tensor:
    """An encoder on a batch: a view of several tensors goes in as keyword arguments."""
    return encoder(**x) if isinstance(x, Mapping) else encoder(x)


def output_width(encoder: nn.Module, view: View) -> int:
    """Features an encoder outputs per item, from a forward pass on two blank items."""
    was_training = encoder.training
    encoder.eval()
    try:
        with torch.no_grad():
            return int(call_encoder(encoder, _blank(view)).shape[-1])
    finally:
        encoder.train(was_training)


def make_head(head: Any, width: int, n_components: int) -> nn.Module:
    """A projection head from ``width`` backbone features to ``n_components``:
    ``'mlp'`` is SimCLR's (Linear(w, w), ReLU, Linear(w, k)), an int ``h`` the same with
    ``h`` hidden units, a module is copied."""
    if head == "mlp":
        head = width
    if isinstance(head, numbers.Integral) and not isinstance(head, bool) and int(head) >= 1:
        return nn.Sequential(nn.Linear(width, int(head)), nn.ReLU(),
                             nn.Linear(int(head), n_components))
    if isinstance(head, nn.Module):
        return copy.deepcopy(head)
    raise ValueError(f"projection_head must be None, 'mlp', a positive int (hidden width) or "
                     f"an nn.Module; got {describe(head)}")


class ViewEncoders(nn.Module):
    """One encoder per view, or one shared by both, each with an optional projection head.

    ``forward`` takes a batch of one view (a tensor) and returns ``(B, k)`` embeddings,
    a pair ``(x0, x1)`` and returns ``(B, 2, k)``, or a pair with each pair's hard
    negatives ``(x0, x1, negatives)``, ``negatives`` of ``(B, m, ...)``, and returns
    ``(B, 2 + m, k)`` (the negatives are view 1's side). Each encoder embeds all its rows
    of the batch in one call: a shared encoder the ``2B`` stacked views, as SimCLR does,
    and the ``B m`` negatives with them; view 1's encoder its view with the negatives.
    So a sparse embedding table gets one sparse gradient per step, not a sum of several
    (which cost a hard-negative column more than its embeddings). The loss sees the
    heads' outputs; :meth:`encode` gives the backbone's with ``head=False``.

    ``frozen`` names submodules (e.g. ``'encoders.0.layer1'``) whose parameters do not
    train and which stay in eval mode, so their batch-norm statistics do not drift.
    """

    def __init__(self, encoders: Sequence[nn.Module], heads: Sequence[nn.Module] | None = None,
                 frozen: Sequence[str] = ()) -> None:
        super().__init__()
        self.encoders = nn.ModuleList(encoders)
        self.heads = None if heads is None else nn.ModuleList(heads)
        self.frozen = tuple(frozen)
        for name in self.frozen:
            self.get_submodule(name).requires_grad_(False)
        self.train()

    def train(self, mode: bool = True) -> ViewEncoders:
        super().train(mode)
        for name in self.frozen:
            self.get_submodule(name).eval()
        return self

    def encode(self, x: Any, view: int = 0, head: bool = True) -> torch.Tensor:
        """Embeddings of a batch of one view (the backbone's features with ``head=False``)."""
        index = min(view, len(self.encoders) - 1)
        z = call_encoder(self.encoders[index], x)
        return self.heads[index](z) if head and self.heads is not None else z

    def forward(self, x: Any) -> torch.Tensor:
        if not isinstance(x, tuple | list):
            return self.encode(x, 0)
        x0, x1, *rest = x
        b = len(next(iter(x0.values()))) if isinstance(x0, Mapping) else len(x0)
        # view 1's side: its rows, then each pair's hard negatives (B m rows)
        side: list[Any] = [x1]
        m = 0
        if rest:
            negatives = rest[0]
            first = next(iter(negatives.values())) if isinstance(negatives, Mapping) \
                else negatives
            m = first.shape[1]
            side.append({key: t.reshape(b * m, *t.shape[2:]) for key, t in negatives.items()}
                        if isinstance(negatives, Mapping)
                        else negatives.reshape(b * m, *negatives.shape[2:]))
        parts = [x0, *side] if len(self.encoders) == 1 else side
        stacked = _stack_views(*parts)
        if stacked is None:  # rows of other shapes: a call each
            z1 = torch.cat([self.encode(part, 1) for part in side])
        elif len(self.encoders) == 1:
            z = self.encode(stacked, 0)
            return _as_columns(z[:b], z[b:], b, m)
        else:
            z1 = self.encode(stacked, 1)
        z0 = self.encode(x0, 0)
        if z0.shape[1:] != z1.shape[1:]:
            raise ValueError(f"the two views' encoders must embed into the same space; they "
                             f"output {tuple(z0.shape[1:])} and {tuple(z1.shape[1:])} per item "
                             "(give both n_out outputs, the estimator's n_components, or a "
                             "projection_head)")
        return _as_columns(z0, z1, b, m)


def _as_columns(z0: torch.Tensor, side: torch.Tensor, b: int, m: int) -> torch.Tensor:
    """``(B, 2 + m, k)``: view 0's ``B`` embeddings, then view 1's ``B`` and the ``B m``
    hard negatives' (``side``, in that order), each item's in a row."""
    if not m:  # pairs, every step of most fits: one stack
        return torch.stack([z0, side], dim=1)
    return torch.cat([z0[:, None], side[:b, None], side[b:].reshape(b, m, -1)], dim=1)


def _stack_views(*views: Any) -> Any:
    """The rows of several views (tensors, or dicts of them) in one batch, for one
    encoder (None when their shapes or keys differ)."""
    first = views[0]
    if isinstance(first, torch.Tensor):  # the common case first (every step)
        shape = first.shape[1:]
        for view in views[1:]:
            if not isinstance(view, torch.Tensor) or view.shape[1:] != shape:
                return None
        return torch.cat(views) if len(views) > 1 else first
    if all(isinstance(v, Mapping) for v in views):
        if any(v.keys() != first.keys() or any(v[k].shape[1:] != first[k].shape[1:]
                                               for k in first) for v in views):
            return None
        return {k: torch.cat([v[k] for v in views]) for k in first}
    return None


def build_encoders(module: Any, views: Sequence[View], hidden_layer_sizes: Sequence[int] | str,
                   n_components: int, shared: bool, *, module_kwargs: dict | None = None,
                   head: Any = None, freeze: Any = None) -> ViewEncoders:
    """Encoders for the given views (one view for single-view data).

    ``module`` is ``None`` (an MLP per view), one encoder (an ``nn.Module`` instance,
    which is copied, a class, or a factory ``f(n_in, n_out)`` with ``n_in`` the number of
    values per item), a pair of those (one per view), or a dict keyed by view name.
    ``module_kwargs`` go to classes and factories; ``head`` puts a projection head (see
    :func:`make_head`) on each encoder; ``freeze`` is ``'backbone'`` or names of parts
    of the module (prefixes of its submodule names) to keep fixed.
    """
    if isinstance(module, Mapping):
        names = [v.name for v in views]
        if len(views) != 2 or sorted(map(str, module)) != sorted(map(str, names)):
            raise ValueError(f"module as a dict must have one encoder per view, keyed "
                             f"{names}; got keys {list(module)}")
        module = [module[name] for name in names]
    if isinstance(module, tuple | list):
        if len(module) != 2 or len(views) != 2:
            raise ValueError(f"module as a sequence must hold two encoders, one per view of "
                             f"paired data; got {len(module)} for {len(views)} view(s)")
        used, encoders = views, [_instantiate(m, v.size, n_components, module_kwargs)
                                 for m, v in zip(module, views, strict=True)]
    else:
        used = views[:1] if shared else views
        if module is None:
            encoders = [default_encoder(v, hidden_layer_sizes, n_components, module_kwargs)
                        for v in used]
        else:
            encoders = [_instantiate(module, v.size, n_components, module_kwargs)
                        for v in used]
    heads = None
    if head is not None:
        heads = [make_head(head, output_width(e, v), n_components)
                 for e, v in zip(encoders, used, strict=True)]
    return ViewEncoders(encoders, heads, _frozen_names(encoders, freeze))


def _frozen_names(encoders: Sequence[nn.Module], freeze: Any) -> list[str]:
    if freeze is None:
        return []
    if freeze == "backbone":
        return ["encoders"]
    if isinstance(freeze, str) or not all(isinstance(p, str) and p for p in freeze):
        raise ValueError(f"freeze must be None, 'backbone' or a list of submodule names of "
                         f"the module (e.g. ['conv1', 'layer1']); got {describe(freeze)}")
    names = []
    for prefix in freeze:
        found = [f"encoders.{i}.{name}" for i, encoder in enumerate(encoders)
                 for name, _ in encoder.named_modules()
                 if name == prefix]
        if not found:
            available = sorted({n.split(".")[0] for e in encoders
                                for n, _ in e.named_modules() if n})
            raise ValueError(f"freeze names {prefix!r}, which the module does not have; its "
                             f"parts are {available[:12]}")
        names += found
    return names


class EncoderFactory:
    """Builds fresh :class:`ViewEncoders`; what the skorch net keeps as its ``module``.

    skorch pickles its trained ``module_`` through ``torch`` with a device map (so a
    model fitted on a GPU loads on a CPU-only machine), but pickles its ``module``
    parameter plainly. Handing skorch this factory, which holds only CPU copies of the
    user's untrained encoders, keeps every trained tensor inside skorch's device-mapped
    attributes.
    """

    def __init__(self, module: Any, views: Sequence[View], hidden_layer_sizes: Sequence[int] | str,
                 n_components: int, shared: bool, module_kwargs: dict | None = None,
                 head: Any = None, freeze: Any = None) -> None:
        self.module = _to_cpu(module)
        self.views = tuple(views)
        self.hidden_layer_sizes: Sequence[int] | str = hidden_layer_sizes \
            if isinstance(hidden_layer_sizes, str) else tuple(hidden_layer_sizes)
        self.n_components = n_components
        self.shared = shared
        self.module_kwargs = dict(module_kwargs or {})
        self.head = _to_cpu(head)
        self.freeze = freeze

    def __call__(self) -> ViewEncoders:
        return build_encoders(self.module, self.views, self.hidden_layer_sizes,
                              self.n_components, self.shared,
                              module_kwargs=self.module_kwargs, head=self.head,
                              freeze=self.freeze)


def _to_cpu(module: Any) -> Any:
    if isinstance(module, nn.Module):
        return copy.deepcopy(module).cpu()
    if isinstance(module, Mapping):
        return {k: _to_cpu(m) for k, m in module.items()}
    if isinstance(module, tuple | list):
        return type(module)(_to_cpu(m) for m in module)
    return module


class ContrastiveCriterion(nn.Module):
    """Loss of a batch of embeddings: the estimator's loss object, with what it learns.

    ``structure`` says how a batch's rows reach the loss, and is what the one
    :class:`~skcontrast.losses.LossBatch` of each batch carries (:meth:`loss_batch`):
    ``'pairs'`` takes ``(B, 2, k)`` embeddings (a label loss then sees each pair as its
    own class); ``'single'`` takes ``(B, k)`` embeddings with labels; ``'crops'`` takes
    ``(B, 2, k)`` (two augmented crops of each row), whose rows are stacked and labels
    repeated. The parameters the loss learns (``learn_temperature``, SigLIP's
    ``learn_bias``) are ``nn.Parameter``s here (named by :attr:`PARAMETERS`): the
    temperature as ``log_temperature_excess``, :math:`\theta` with
    :math:`\tau = 0.01 + e^{\theta}`, so that it stays above 0.01 with a gradient
    everywhere (a clamp at the floor would stop it learning).

    :meth:`live_loss` is the loss as it is at this moment of training (its learned
    values as numbers): what adaptive selectors score with. With a ``memory``
    (:mod:`skcontrast.memory`), training batches (``remember=True``, with the dataset
    ``index`` of their items) go through its state, ``memory_state``, a submodule, so
    that it is pickled and moved with the criterion. ``sampler`` makes the fit's
    :class:`~skcontrast.selectors.SelectorSampler` given its ``loss`` (here
    :meth:`live_loss`, which the sampler calls each time it selects); where its batch
    selection stands is then the criterion's state too (``progress``,
    :class:`SelectionProgress`): skorch's ``Checkpoint``, which saves the criterion's
    ``state_dict``, keeps it, and ``LoadInitState`` resumes from it.
    """

    #: The state-dict name of each learnable loss parameter.
    PARAMETERS: ClassVar[dict[str, str]] = {"temperature": "log_temperature_excess",
                                            "bias": "learned_bias"}
    #: The state-dict entry of a memory's counters (``n_samples``, a queue's pointer),
    #: which it keeps beside its buffers (no buffer shows how many samples it remembers)
    MEMORY_COUNTERS: ClassVar[str] = "memory_state._extra_state"

    #: The state-dict entry of the selection's progress (:class:`SelectionProgress`)
    PROGRESS: ClassVar[str] = "progress._extra_state"

    def __init__(self, loss: Loss, *, structure: str = "pairs", memory: Any = None,
                 n_samples: int | None = None, row_keys: Any = None,
                 row_groups: Any = None, held_out_keys: Any = None,
                 held_out_groups: Any = None, sampler: Any = None,
                 rows: str | None = None) -> None:
        super().__init__()
        # the fit's sampler, made here to read the loss as it is when it selects
        self.progress = None if sampler is None else \
            SelectionProgress(sampler(loss=self.live_loss), rows)
        self.loss = loss
        self.structure = structure
        # per training row (and held-out row): content ids of its texts (anchor,
        # positive, negatives) and its group, for the loss's false-negative guard
        self.row_keys = row_keys
        self.row_groups = row_groups
        self.held_out_keys = held_out_keys
        self.held_out_groups = held_out_groups
        if getattr(loss, "learn_temperature", False):
            excess = float(loss.temperature) - MIN_LEARNED_TEMPERATURE
            self.log_temperature_excess = nn.Parameter(torch.tensor(math.log(excess)))
        if getattr(loss, "learn_bias", False):
            self.learned_bias = nn.Parameter(torch.tensor(float(loss.bias)))
        self.memory_state = None if memory is None else memory.build(n_samples, loss,
                                                                      structure)

    @property
    def learn_temperature(self) -> bool:
        return hasattr(self, "log_temperature_excess")

    @property
    def temperature(self) -> Any:
        """The temperature now: a tensor when learned, else the loss's number."""
        if self.learn_temperature:
            return self.log_temperature_excess.exp() + MIN_LEARNED_TEMPERATURE
        return self.loss.temperature

    def learned(self) -> dict:
        """The learned values (tensors, with their gradient) the loss is called with."""
        out = {}
        if self.learn_temperature:
            out["temperature"] = self.temperature
        if hasattr(self, "learned_bias"):
            out["bias"] = self.learned_bias
        return out

    def live_loss(self) -> Loss:
        """The loss with the values it has learned so far, as numbers."""
        return self.loss.live(**{k: float(v.detach()) for k, v in self.learned().items()})

    def forward(self, embeddings: torch.Tensor, y: torch.Tensor | None = None,
                index: torch.Tensor | None = None, remember: bool = False,
                training: bool = True) -> LossTerms:
        """The loss of a batch (``index``: its rows of the training data, or of the
        held-out data when not ``training``); a training batch that is remembered goes
        through the memory."""
        overrides = self.learned()
        batch = self.loss_batch(embeddings, y, index, training)
        if remember and self.memory_state is not None:
            return self.memory_state(
                lambda **extra: self.loss.batch_terms(batch, **overrides, **extra),
                batch, loss=self.loss, overrides=overrides)
        return self.loss.batch_terms(batch, **overrides)

    def loss_batch(self, embeddings: torch.Tensor, y: torch.Tensor | None,
                   index: torch.Tensor | None, training: bool = True) -> LossBatch:
        """The :class:`~skcontrast.losses.LossBatch` of a batch: its structure, labels,
        rows, and the guard's content ids and groups of those rows."""
        keys, groups = (self.row_keys, self.row_groups) if training else \
            (self.held_out_keys, self.held_out_groups)
        rows = None if index is None or (keys is None and groups is None) else \
            index.to("cpu", torch.long)
        # a held-out batch's rows are not training rows: a guide table does not index them
        return LossBatch(embeddings, self.structure, None if self.structure == "pairs" else y,
                         index if training else None,
                         None if keys is None or rows is None else keys[rows],
                         None if groups is None or rows is None else groups[rows])

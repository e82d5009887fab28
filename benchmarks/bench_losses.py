"""Losses vs pytorch-metric-learning: forward+backward time and peak memory.

Run:  python benchmarks/bench_losses.py [--sizes 256 1024 4096] [--large 8192 ... 65536]
                                        [--dim 128] [--chunk 1024]

Side by side in one process, CPU, 2 threads: ``skcontrast.losses.nt_xent`` vs PML
``NTXentLoss`` and ``skcontrast.losses.supcon`` vs PML ``SupConLoss`` (10 classes).
The two implementations are first checked to give the same loss value. PML's NTXent
builds a (2B) x (2B)(2B-2) table; where that would not fit in this machine's memory the
run is skipped and the memory it would need is printed instead.

The second table follows the batch size up to B = 65,536: the dense losses against the
tiled ones (``chunk_size``, O(B (d + chunk)) memory), PML beside them where it fits,
and on a GPU Inf-CL's ``cal_inf_loss`` (one-sided InfoNCE, Triton) beside the tiled
``info_nce``. A case is skipped, with the memory it would need, when it would not fit.

The third table is SigLIP (``--siglip 1024 4096 ...``): ``skcontrast.losses.siglip``
dense and tiled against open_clip's ``SigLipLoss`` (``pip install --no-deps
open_clip_torch``), which on one device holds the B x B logits for autograd.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(__file__))
from _harness import (
    available_memory_bytes,
    fmt_mib,
    fmt_seconds,
    import_open_clip_loss,
    import_pml,
    measure,
    set_threads,
    table,
)

from skcontrast import losses

TEMPERATURE = 0.1
REPEATS = 7


def pml_ntxent_bytes(b: int) -> int:
    """PML NTXent holds ~4 float tensors of shape (2B, 2B(2B-2)) at its peak."""
    return 4 * 4 * (2 * b) * (2 * b) * (2 * b - 2)


def fwd_bwd(loss_fn, *tensors):
    """Forward and backward with gradients for the float tensors (not labels)."""
    def run():
        leaves = [t.detach().requires_grad_(True) if t.is_floating_point() else t
                  for t in tensors[:2]]
        loss_fn(*leaves, *tensors[2:]).backward()
    return run


def bench_ntxent(b: int, d: int, pml) -> list[str]:
    g = torch.Generator().manual_seed(b)
    u, v = torch.randn(b, d, generator=g), torch.randn(b, d, generator=g)
    labels = torch.arange(b).repeat(2)
    ours = fwd_bwd(lambda a, c: losses.nt_xent(a, c, temperature=TEMPERATURE), u, v)
    t_ours, m_ours = measure(ours, repeats=REPEATS)
    row = [f"nt_xent B={b}", fmt_seconds(t_ours), fmt_mib(m_ours)]
    need = pml_ntxent_bytes(b)
    if pml is None:
        return [*row, "not installed", "", "", ""]
    if need > 0.6 * available_memory_bytes():
        return [*row, f"skipped: needs ~{need / 2**30:.0f} GiB", "", "", ""]
    peer = pml.losses.NTXentLoss(temperature=TEMPERATURE)

    def pml_loss(a, c):
        return peer(torch.cat([a, c]), labels)

    agree = abs(float(pml_loss(u, v)) - float(losses.nt_xent(u, v, temperature=TEMPERATURE)))
    t_pml, m_pml = measure(fwd_bwd(pml_loss, u, v), repeats=REPEATS)
    return [*row, fmt_seconds(t_pml), fmt_mib(m_pml), f"{t_pml / t_ours:7.1f}x",
            f"{agree:.1e}"]


def bench_supcon(b: int, d: int, pml, n_classes: int = 10) -> list[str]:
    g = torch.Generator().manual_seed(b + 1)
    z = torch.randn(b, d, generator=g)
    y = torch.randint(0, n_classes, (b,), generator=g)
    ours = fwd_bwd(lambda a: losses.supcon(a, y, temperature=TEMPERATURE), z)
    t_ours, m_ours = measure(ours, repeats=REPEATS)
    row = [f"supcon B={b}", fmt_seconds(t_ours), fmt_mib(m_ours)]
    if pml is None:
        return [*row, "not installed", "", "", ""]
    peer = pml.losses.SupConLoss(temperature=TEMPERATURE)
    agree = abs(float(peer(z, y)) - float(losses.supcon(z, y, temperature=TEMPERATURE)))
    t_pml, m_pml = measure(fwd_bwd(lambda a: peer(a, y), z), repeats=REPEATS)
    return [*row, fmt_seconds(t_pml), fmt_mib(m_pml), f"{t_pml / t_ours:7.1f}x",
            f"{agree:.1e}"]


def dense_bytes(loss: str, b: int) -> int:
    """Peak of the dense loss: about two (rows x rows) float32 matrices."""
    rows = 2 * b if loss == "nt_xent" else b
    return 2 * 4 * rows * rows


def pml_bytes(loss: str, b: int) -> int:
    """PML SupCon holds about twelve (B x B) float32 matrices at its peak (measured: 806 MB
    at B = 4,096)."""
    return pml_ntxent_bytes(b) if loss == "nt_xent" else 12 * 4 * b * b


# --------------------------------------------------------------------------------------
# Against the plainest PyTorch form a user would write (no peer library, none of ours)
# --------------------------------------------------------------------------------------

def _plain_info_nce(u, v, t):
    un, vn = F.normalize(u, dim=-1), F.normalize(v, dim=-1)
    logits = un @ vn.T / t
    return F.cross_entropy(logits, torch.arange(len(u)))


def _plain_symmetric(u, v, t):
    un, vn = F.normalize(u, dim=-1), F.normalize(v, dim=-1)
    logits = un @ vn.T / t
    labels = torch.arange(len(u))
    return F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)


def _plain_nt_xent(u, v, t):
    z = F.normalize(torch.cat([u, v]), dim=-1)
    logits = (z @ z.T / t).fill_diagonal_(float("-inf"))
    b = len(u)
    return F.cross_entropy(logits, (torch.arange(2 * b) + b) % (2 * b))


def _plain_supcon(z, y, t):
    """Khosla et al.'s loss as users write it: a masked log-softmax, the mean of the log
    probabilities of each anchor's positives (every anchor here has some)."""
    z = F.normalize(z, dim=-1)
    self_mask = torch.eye(len(z), dtype=torch.bool)
    logits = (z @ z.T / t).masked_fill(self_mask, float("-inf"))
    log_prob = logits - torch.logsumexp(logits, dim=1, keepdim=True)
    positives = (y[:, None] == y[None, :]) & ~self_mask
    return -(log_prob.masked_fill(~positives, 0).sum(1) / positives.sum(1)).mean()


def _plain_siglip(u, v, t, bias=-10.0):
    un, vn = F.normalize(u, dim=-1), F.normalize(v, dim=-1)
    logits = un @ vn.T / t + bias
    signs = 2 * torch.eye(len(u)) - 1
    return -F.logsigmoid(signs * logits).sum() / len(u)


#: loss name -> (our call, the plain form), both on (a, b) where b is labels for SupCon
PLAIN_FORMS = {
    "info_nce": (lambda a, b: losses.info_nce(a, b, temperature=TEMPERATURE),
                 lambda a, b: _plain_info_nce(a, b, TEMPERATURE)),
    "symmetric_info_nce": (lambda a, b: losses.symmetric_info_nce(a, b, temperature=TEMPERATURE),
                           lambda a, b: _plain_symmetric(a, b, TEMPERATURE)),
    "nt_xent": (lambda a, b: losses.nt_xent(a, b, temperature=TEMPERATURE),
                lambda a, b: _plain_nt_xent(a, b, TEMPERATURE)),
    "supcon": (lambda a, b: losses.supcon(a, b, temperature=TEMPERATURE),
               lambda a, b: _plain_supcon(a, b, TEMPERATURE)),
    "siglip": (lambda a, b: losses.siglip(a, b, temperature=TEMPERATURE),
               lambda a, b: _plain_siglip(a, b, TEMPERATURE)),
}


def plain_rows(sizes: list[int], dims: list[int], repeats: int = 31) -> list[list[str]]:
    """Forward+backward of each loss against its plainest form, interleaved runs."""
    rows = []
    for b in sizes:
        for d in dims:
            g = torch.Generator().manual_seed(b + d)
            u, v = torch.randn(b, d, generator=g), torch.randn(b, d, generator=g)
            y = torch.arange(b) % max(2, b // 8)  # 8 samples per class
            for name, (ours, plain) in PLAIN_FORMS.items():
                second = y if name == "supcon" else v
                agree = abs(float(ours(u, second)) - float(plain(u, second)))
                runs = {"ours": fwd_bwd(ours, u, second), "plain": fwd_bwd(plain, u, second)}
                times: dict[str, list[float]] = {"ours": [], "plain": []}
                for fn in runs.values():
                    fn()  # warm-up
                for _ in range(repeats):  # interleaved, so drift hits both alike
                    for key, fn in runs.items():
                        start = time.perf_counter()
                        fn()
                        times[key].append(time.perf_counter() - start)
                t_ours, t_plain = (statistics.median(times[k]) for k in ("ours", "plain"))
                rows.append([f"{name} B={b} d={d}", fmt_seconds(t_ours), fmt_seconds(t_plain),
                             f"{t_ours / t_plain:5.2f}x", f"{agree:.1e}"])
    return rows


def large_row(loss: str, b: int, d: int, chunk: int, pml, device: str) -> list[str]:
    g = torch.Generator().manual_seed(b)
    u = torch.randn(b, d, generator=g).to(device)
    v = torch.randn(b, d, generator=g).to(device)
    y = torch.randint(0, 10, (b,), generator=g).to(device)
    fns = {"nt_xent": lambda a, c, **kw: losses.nt_xent(a, c, temperature=TEMPERATURE, **kw),
           "supcon": lambda a, c, **kw: losses.supcon(a, y, temperature=TEMPERATURE, **kw),
           "info_nce": lambda a, c, **kw: losses.info_nce(a, c, temperature=TEMPERATURE, **kw)}
    fn = fns[loss]
    repeats = 3 if b <= 8192 else 1
    free = available_memory_bytes() if device == "cpu" else torch.cuda.mem_get_info()[0]
    cells = [f"{loss} B={b}"]
    warmup = 1 if b <= 16384 else 0
    t_tiled, m_tiled = measure(fwd_bwd(lambda a, c: fn(a, c, chunk_size=chunk), u, v),
                               repeats=repeats, warmup=warmup, device=device)
    if dense_bytes(loss, b) > 0.6 * free:
        cells += [f"needs ~{dense_bytes(loss, b) / 2**30:.0f} GiB", ""]
    else:
        t_dense, m_dense = measure(fwd_bwd(lambda a, c: fn(a, c, chunk_size=None), u, v),
                                   repeats=repeats, warmup=warmup, device=device)
        cells += [fmt_seconds(t_dense), fmt_mib(m_dense)]
    cells += [fmt_seconds(t_tiled), fmt_mib(m_tiled)]
    peer = None
    if loss == "info_nce" and device == "cuda":
        try:
            from inf_cl import cal_inf_loss
        except ImportError:
            cells += ["inf-cl not installed", ""]
        else:
            peer = lambda a, c: cal_inf_loss(a, c, scale=torch.tensor(  # noqa: E731
                1 / TEMPERATURE, device=device), head_dim=d)
    elif pml is not None and loss in ("nt_xent", "supcon"):
        if pml_bytes(loss, b) > 0.6 * free:
            cells += [f"needs ~{pml_bytes(loss, b) / 2**30:.0f} GiB", ""]
        else:
            pml_loss = pml.losses.NTXentLoss(temperature=TEMPERATURE) if loss == "nt_xent" \
                else pml.losses.SupConLoss(temperature=TEMPERATURE)
            labels = torch.arange(b, device=device).repeat(2)
            peer = (lambda a, c: pml_loss(torch.cat([a, c]), labels)) if loss == "nt_xent" \
                else (lambda a, c: pml_loss(a, y))
    else:
        cells += ["—", ""]
    if peer is not None:
        t_peer, m_peer = measure(fwd_bwd(peer, u, v), repeats=repeats, warmup=warmup,
                                 device=device)
        cells += [fmt_seconds(t_peer), fmt_mib(m_peer)]
    return cells


def siglip_row(b: int, d: int, chunk: int, open_clip_loss: Any) -> list[str]:
    """SigLIP forward+backward at batch ``b``: ours dense and tiled, open_clip's beside."""
    g = torch.Generator().manual_seed(b)
    u = torch.nn.functional.normalize(torch.randn(b, d, generator=g), dim=1)
    v = torch.nn.functional.normalize(torch.randn(b, d, generator=g), dim=1)
    scale, bias = torch.tensor(10.0), torch.tensor(-10.0)

    def ours(chunk_size):
        return lambda a, c: losses.siglip(a, c, temperature=1 / scale, bias=bias,
                                          normalize=False, chunk_size=chunk_size)

    repeats = 3 if b <= 8192 else 1
    free = available_memory_bytes()
    cells = [f"siglip B={b}"]
    t_tiled, m_tiled = measure(fwd_bwd(ours(chunk), u, v), repeats=repeats)
    dense_need = 3 * 4 * b * b
    if dense_need > 0.6 * free:
        cells += [f"needs ~{dense_need / 2**30:.0f} GiB", ""]
    else:
        t_dense, m_dense = measure(fwd_bwd(ours(None), u, v), repeats=repeats)
        cells += [fmt_seconds(t_dense), fmt_mib(m_dense)]
    cells += [fmt_seconds(t_tiled), fmt_mib(m_tiled)]
    if open_clip_loss is None:
        return [*cells, "not installed", "", ""]
    if dense_need > 0.6 * free:
        return [*cells, f"needs ~{dense_need / 2**30:.0f} GiB", "", ""]
    peer = open_clip_loss.SigLipLoss()

    def theirs(a, c):
        return peer(a, c, scale, bias)

    agree = abs(float(theirs(u, v)) - float(ours(chunk)(u, v)))
    t_peer, m_peer = measure(fwd_bwd(theirs, u, v), repeats=repeats)
    return [*cells, fmt_seconds(t_peer), fmt_mib(m_peer), f"{agree:.1e}"]


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 1024, 4096],
                        help="batch sizes of the table against pytorch-metric-learning")
    parser.add_argument("--large", type=int, nargs="*", default=None,
                        help="batch sizes of the dense-vs-tiled table (default: 4096 to "
                             "65536, unless --sizes is given; none: skip it)")
    parser.add_argument("--large-losses", nargs="+", default=["nt_xent", "supcon"],
                        help="losses of the dense-vs-tiled table")
    parser.add_argument("--chunk", type=int, default=1024,
                        help="rows per tile of the tiled losses")
    parser.add_argument("--siglip", type=int, nargs="*", default=None,
                        help="batch sizes of the SigLIP table (default: 1024 to 16384, "
                             "unless --sizes is given; none: skip it)")
    parser.add_argument("--dim", type=int, default=128,
                        help="embedding width d")
    parser.add_argument("--threads", type=int, default=2,
                        help="torch threads on the CPU")
    parser.add_argument("--plain", type=int, nargs="*", default=[256, 1024],
                        help="batch sizes of the table against the plain PyTorch forms "
                             "(none: skip it)")
    parser.add_argument("--plain-dims", type=int, nargs="+", default=[32, 128],
                        help="embedding widths of that table")
    args = parser.parse_args(argv)
    sized = "--sizes" in (sys.argv[1:] if argv is None else argv)  # a run of chosen sizes
    if args.large is None:
        args.large = [] if sized else [4096, 8192, 16384, 32768, 65536]
    if args.siglip is None:
        args.siglip = [] if sized else [1024, 4096, 8192, 16384]
    set_threads(args.threads)
    text = ""
    if args.plain:
        header = ["case", "skcontrast", "plain torch", "ours/plain", "|Δloss|"]
        text = (f"forward+backward against the plainest PyTorch form (F.cross_entropy on one "
                f"logits matrix; a masked log-softmax for SupCon; logsigmoid for SigLIP), "
                f"CPU, {torch.get_num_threads()} threads, median of interleaved runs\n"
                + table(plain_rows(args.plain, args.plain_dims), header) + "\n\n")
        print(text, flush=True)
    pml = import_pml("losses")
    rows = [bench_ntxent(b, args.dim, pml) for b in args.sizes]
    rows += [bench_supcon(b, args.dim, pml) for b in args.sizes]
    header = ["case", "skcontrast", "peak mem", "PML", "PML peak", "PML/ours", "|Δloss|"]
    section = (f"forward+backward, d={args.dim}, CPU, {torch.get_num_threads()} threads, "
               f"torch {torch.__version__}\n" + table(rows, header))
    print(section, flush=True)
    text += section
    if args.large:
        device = "cuda" if torch.cuda.is_available() else "cpu"
        names = list(args.large_losses) + (["info_nce"] if device == "cuda" else [])
        large = [large_row(loss, b, args.dim, args.chunk, pml, device)
                 for loss in names for b in args.large]
        header = ["case", "dense", "dense peak", f"tiled {args.chunk}", "tiled peak",
                  "peer (PML / inf-cl)", "peer peak"]
        section = (f"\ndense vs tiled, forward+backward, d={args.dim}, {device}"
                   + (f", {torch.get_num_threads()} threads" if device == "cpu" else "")
                   + "\n" + table(large, header))
        print(section)
        text += "\n" + section
    if args.siglip:
        open_clip_loss = import_open_clip_loss()
        rows = [siglip_row(b, args.dim, args.chunk, open_clip_loss) for b in args.siglip]
        header = ["case", "dense", "dense peak", f"tiled {args.chunk}", "tiled peak",
                  "open_clip", "open_clip peak", "|Δloss|"]
        section = (f"\nSigLIP, forward+backward, d={args.dim}, CPU, "
                   f"{torch.get_num_threads()} threads\n" + table(rows, header))
        print(section)
        text += "\n" + section
    return text


if __name__ == "__main__":
    main()

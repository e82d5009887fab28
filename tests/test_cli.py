"""The command line's own logic (fast; the commands themselves run in
test_cli_examples.py)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from skcontrast import _cli
from skcontrast._cli import main, pick_threads


def test_a_number_of_threads_is_the_users_choice():
    assert pick_threads("3") == (3, "--threads")
    assert pick_threads(1) == (1, "--threads")


@pytest.mark.parametrize("bad", ["0", "-2", "many", "1.5"])
def test_a_bad_thread_count_names_the_option_and_the_value(bad):
    with pytest.raises(SystemExit, match=rf"--threads must be a positive integer.*{bad}"):
        pick_threads(bad)


def test_auto_honours_omp_num_threads(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "5")
    assert pick_threads("auto") == (5, "OMP_NUM_THREADS")


@pytest.mark.parametrize(("cores", "load", "expected"),
                         [(8, 0.2, 8), (8, 4.0, 8), (8, 5.0, 3), (8, 6.4, 2),
                          (2, 1.0, 2), (2, 1.6, 1), (2, 9.0, 1), (4, 0.0, 4)])
def test_auto_keeps_every_core_under_light_load_and_the_free_ones_beyond(
        monkeypatch, cores, load, expected):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)), raising=False)
    monkeypatch.setattr(os, "getloadavg", lambda: (load, load, load))
    threads, why = pick_threads("auto")
    assert threads == expected
    assert f"{cores} cores" in why


def test_the_commands_apply_the_count_to_torch_and_blas(monkeypatch, capsys):
    import torch
    from threadpoolctl import threadpool_info

    before = torch.get_num_threads()
    args = _cli.build_parser().parse_args(["synthetic", "--threads", "1"])
    try:
        _cli._use_threads(args)
        assert torch.get_num_threads() == 1
        assert all(pool["num_threads"] == 1 for pool in threadpool_info())
        assert "using 1 CPU thread(s) (--threads" in capsys.readouterr().out
    finally:
        args.thread_limits.restore_original_limits()
        torch.set_num_threads(before)


def test_cli_bench_default_version_and_foreign_benchmark_folders(monkeypatch, tmp_path,
                                                                 capsys):
    from skcontrast import __version__, _cli

    ran = []
    monkeypatch.setattr(_cli.runpy, "run_path", lambda path, run_name: ran.append(path))
    real = _cli._benchmark_dir
    # the repository's benchmarks (the package under test may be an installed wheel)
    monkeypatch.setattr(_cli, "_benchmark_dir",
                        lambda root=None: Path(__file__).resolve().parents[1] / "benchmarks")
    assert _cli.main(["bench"]) == 0
    assert ran and ran[0].endswith("bench_losses.py")
    assert _cli.main(["bench", "nonsense"]) == 2
    assert "unknown benchmark(s) nonsense" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _cli.main(["--version"])
    assert capsys.readouterr().out.strip() == f"skcontrast {__version__}"
    site = tmp_path / "site-packages"
    (site / "benchmarks").mkdir(parents=True)
    (site / "skcontrast").mkdir()
    assert real(site) is None  # another distribution's folder
    (site / "pyproject.toml").write_text('[project]\nname = "skcontrast"\n')
    assert real(site) == site / "benchmarks"
    monkeypatch.setattr(_cli, "_benchmark_dir", lambda root=None: None)  # a wheel install
    assert _cli.main(["bench"]) == 2
    assert "does not include" in capsys.readouterr().err


@pytest.mark.slow
def test_synthetic_command(tmp_path, capsys, monkeypatch):
    from matplotlib.figure import Figure

    saved = []
    original = Figure.savefig

    def keep(fig, *args, **kwargs):
        saved.append(fig)
        return original(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    code = main(["synthetic", "--n", "4", "--d", "8", "--steps", "20", "--seeds", "1",
                 "--out", str(tmp_path)])
    [fig] = saved
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    for ax in fig.axes:  # every panel title inside the figure, none cut off at the top
        box = ax.title.get_window_extent(renderer)
        assert box.y1 <= fig.bbox.y1 and box.x0 >= fig.bbox.x0 - 1
    out = capsys.readouterr().out
    assert code == 0
    for method in ("full batch", "all C(N,B)", "fixed", "shuffled", "OSGD", "spectral",
                   "BcS", "ScB"):
        assert method in out
    assert (tmp_path / "synthetic_gram_N4_d8.png").exists()


@pytest.mark.slow
def test_python_dash_m_runs_the_cli():
    done = subprocess.run([sys.executable, "-m", "skcontrast", "--help"], capture_output=True,
                          text=True, check=True)
    for command in ("demo", "synthetic", "bench"):
        assert command in done.stdout

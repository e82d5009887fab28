"""The command line's own logic (fast; the commands themselves run in
test_cli_examples.py)."""

import os

import pytest

from skcontrast import _cli
from skcontrast._cli import pick_threads


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

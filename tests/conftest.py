"""Shared pytest configuration: hypothesis profiles and device helpers."""

import os

import pytest
import torch
from hypothesis import HealthCheck, settings

# Bounded, derandomised examples keep CI fast and free of flakiness; use
# HYPOTHESIS_PROFILE=dev locally for a deeper search.
settings.register_profile(
    "ci",
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("dev", max_examples=300, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

torch.set_num_threads(min(2, torch.get_num_threads()))

CUDA = torch.cuda.is_available()
requires_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU; none is usable here")

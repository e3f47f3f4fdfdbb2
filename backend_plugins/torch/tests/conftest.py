"""Hypothesis profiles for the tenferro-torch tests (shared with the root suite)."""

from __future__ import annotations

from tenferro_runtime.testing.profiles import load_profiles, pytest_collection_modifyitems  # noqa: F401
from tenferro_torch.discovery import cuda_device_count

load_profiles()

# The GPU tests are real tests for machines with CUDA; elsewhere they are not collected.
collect_ignore = [] if cuda_device_count() else ["test_cuda.py"]

"""tenferro-forge: turn an op signature into a kernel task, verify and benchmark candidate
kernels in processes they cannot reach into, and promote the ones that pass into a registry
that dispatch reads (docs/forge.md)."""

from __future__ import annotations

VERIFIER_VERSION = 2
"""Bumped whenever the verifier gains a check (`reverify` re-runs every entry); 2: Triton
candidates (launch count, torch ops in the launcher, GPU tensors)."""

__all__ = ["VERIFIER_VERSION"]

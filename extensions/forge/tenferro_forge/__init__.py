"""tenferro-forge: turn an op signature into a kernel task, verify and benchmark candidate
kernels in processes they cannot reach into, and promote the ones that pass into a registry
that dispatch reads (docs/forge.md)."""

from __future__ import annotations

VERIFIER_VERSION = 1
"""Bumped whenever the verifier gains a check (`reverify` re-runs every entry)."""

__all__ = ["VERIFIER_VERSION"]

"""Optimizers (SGD, Adam, AdamW) with PyTorch's update formulas, usable functionally (a pure
`update` on pytrees, for compiled train steps) or PyTorch-style (`step` updates parameters in
place), plus gradient clipping. See `base` for the two APIs and the state layout."""

from __future__ import annotations

from .algorithms import SGD, Adam, AdamW
from .base import Hook, HyperparameterError, NonFiniteError, Optimizer, OptState, StepRecord, leaf_paths
from .clip import clip_grad_norm, global_norm

__all__ = [
    "SGD", "Adam", "AdamW", "Hook", "HyperparameterError", "NonFiniteError", "OptState", "Optimizer",
    "StepRecord", "clip_grad_norm", "global_norm", "leaf_paths",
]

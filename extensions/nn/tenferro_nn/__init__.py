"""tenferro-nn: modules, layers, losses, optimizers, data loading and safetensors serialization.

Modules are registered pytrees (`tenferro_nn.module`), so models pass through `grad`,
`GradientTape` and `compile` like any tensor container, and optimizers keep their state as
pytrees, so a whole train step compiles into one graph.
"""

from __future__ import annotations

from .module import LoadResult, Module, StateDictError, map_tensors, trainable_mask

__version__ = "0.1.0"
__all__ = ["LoadResult", "Module", "StateDictError", "map_tensors", "trainable_mask"]

# data and serialization
from .data import ArrayDataset, DataLoader, Dataset, default_collate  # noqa: E402
from .serialization import (  # noqa: E402
    MissingFileError,
    SerializationError,
    load,
    load_metadata,
    load_model,
    load_state,
    save,
    save_model,
    save_state,
)

__all__ += [
    "ArrayDataset", "DataLoader", "Dataset", "MissingFileError", "SerializationError", "default_collate",
    "load", "load_metadata", "load_model", "load_state", "save", "save_model", "save_state",
]

# losses and optimizers
from .losses import (  # noqa: E402
    BCEWithLogitsLoss,
    CrossEntropyLoss,
    MSELoss,
    NLLLoss,
    binary_cross_entropy_with_logits,
    cross_entropy,
    mse_loss,
    nll_loss,
)
from .optim import (  # noqa: E402
    SGD,
    Adam,
    AdamW,
    HyperparameterError,
    NonFiniteError,
    Optimizer,
    OptState,
    StepRecord,
    clip_grad_norm,
)
from .schedules import cosine_annealing, linear_warmup, sequential, step_lr  # noqa: E402

__all__ += [
    "SGD", "Adam", "AdamW", "BCEWithLogitsLoss", "CrossEntropyLoss", "HyperparameterError", "MSELoss",
    "NLLLoss", "NonFiniteError", "OptState", "Optimizer", "StepRecord", "binary_cross_entropy_with_logits",
    "clip_grad_norm", "cosine_annealing", "cross_entropy", "linear_warmup", "mse_loss", "nll_loss",
    "sequential", "step_lr",
]

# layers (functional, init, layers)
from . import checks, functional, init, layers  # noqa: E402
from .layers import (  # noqa: E402
    GELU,
    AvgPool2d,
    BatchNorm1d,
    BatchNorm2d,
    Conv2d,
    Dropout,
    Embedding,
    Flatten,
    LayerNorm,
    Linear,
    LogSoftmax,
    MaxPool2d,
    MultiheadAttention,
    ReLU,
    Sequential,
    Sigmoid,
    SiLU,
    Softmax,
    Tanh,
)

__all__ += [
    "AvgPool2d", "BatchNorm1d", "BatchNorm2d", "Conv2d", "Dropout", "Embedding", "Flatten", "GELU",
    "LayerNorm", "Linear", "LogSoftmax", "MaxPool2d", "MultiheadAttention", "ReLU", "Sequential", "SiLU",
    "Sigmoid", "Softmax", "Tanh", "checks", "functional", "init", "layers",
]

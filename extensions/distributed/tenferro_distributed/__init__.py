"""tenferro-distributed: collectives as tenferro primitives on torch.distributed.

Launch with ``torchrun --nproc-per-node=N script.py`` (or any launcher setting RANK and
WORLD_SIZE), then::

    import tenferro_distributed as dist
    dist.init()                                   # gloo on CPU, NCCL for torch:cuda
    y = dist.all_reduce(x, "mean")                # eager, under grad, inside compile
    w = dist.all_reduce_async(g); ...; g = w.wait()
    dist.shutdown()

- group.py: init/shutdown/rank/world_size/barrier, sequence numbers, heartbeat, fault diagnosis;
- ops.py: the primitives (effectful), kernels, AD/batch/cost rules;
- api.py: the user functions and async variants;
- algorithms.py: native, ring, tree, recursive halving-doubling over isend/irecv;
- costmodel.py: alpha-beta model, calibrate(), set_policy();
- errors.py: RankFailureError, CollectiveTimeoutError, ... (all TenferroErrors).

Importing this package does not import torch; the first collective (or init) does.
"""

from tenferro_distributed.algorithms import ALGORITHMS
from tenferro_distributed.api import (
                                      all_gather,
                                      all_gather_async,
                                      all_reduce,
                                      all_reduce_async,
                                      broadcast,
                                      broadcast_async,
                                      reduce_scatter,
                                      reduce_scatter_async,
)
from tenferro_distributed.checkpoint import load_checkpoint, save_checkpoint
from tenferro_distributed.costmodel import CostModel, calibrate, fit, set_policy, time_all_reduce
from tenferro_distributed.data_parallel import (
                                      DataParallel,
                                      allreduce_gradients,
                                      broadcast_parameters,
                                      deterministic_value_and_grad,
)
from tenferro_distributed.errors import (
                                      CollectiveError,
                                      CollectiveMismatchError,
                                      CollectiveTimeoutError,
                                      DistributedError,
                                      NotInitializedError,
                                      RankFailureError,
                                      UnknownAlgorithmError,
)
from tenferro_distributed.group import (
                                      Group,
                                      Work,
                                      barrier,
                                      current,
                                      init,
                                      is_initialized,
                                      local_rank,
                                      rank,
                                      shutdown,
                                      world_size,
)
from tenferro_distributed.job_energy import JobEnergy, JobEnergyBudgetExceeded
from tenferro_distributed.sampler import DistributedSampler
from tenferro_distributed.zero import ZeroOptimizer

__all__ = ["init", "shutdown", "is_initialized", "rank", "world_size", "local_rank", "barrier", "current",
           "Group", "Work", "all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_reduce_async",
           "all_gather_async", "reduce_scatter_async", "broadcast_async", "ALGORITHMS", "CostModel",
           "calibrate", "fit", "set_policy", "DistributedError", "NotInitializedError", "CollectiveError",
           "RankFailureError", "CollectiveTimeoutError", "CollectiveMismatchError", "UnknownAlgorithmError"]
__all__ += ["DataParallel", "allreduce_gradients", "broadcast_parameters", "deterministic_value_and_grad",
            "DistributedSampler", "ZeroOptimizer", "save_checkpoint", "load_checkpoint", "JobEnergy",
            "JobEnergyBudgetExceeded", "time_all_reduce"]

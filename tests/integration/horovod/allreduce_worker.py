"""One Horovod rank: sums (rank + 1) over all ranks and prints what it got."""

import horovod.torch as hvd
import torch

hvd.init()
total = hvd.allreduce(torch.tensor([hvd.rank() + 1.0]), op=hvd.Sum)
print(f"rank={hvd.rank()} size={hvd.size()} sum={total.item():g}", flush=True)
hvd.shutdown()

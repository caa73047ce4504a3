"""A few steps of Horovod's elastic PyTorch API (hvd.elastic.run with a TorchState), then a summary line."""

import sys

import horovod.torch as hvd
import torch

steps = int(sys.argv[1])

hvd.init()
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
optimizer = hvd.DistributedOptimizer(
    torch.optim.SGD(model.parameters(), lr=0.01), named_parameters=model.named_parameters()
)
state = hvd.elastic.TorchState(model=model, optimizer=optimizer, step=0)


@hvd.elastic.run
def train(state: hvd.elastic.TorchState) -> None:
    while state.step < steps:
        optimizer.zero_grad()
        features = torch.randn(8, 4)
        loss = torch.nn.functional.mse_loss(model(features), features.sum(dim=1, keepdim=True))
        loss.backward()
        optimizer.step()
        state.step += 1
        state.commit()


train(state)
# Every rank must hold the same weights after synchronous data-parallel steps.
weights = hvd.allgather(torch.cat([p.detach().flatten() for p in model.parameters()]).unsqueeze(0))
same = bool(torch.allclose(weights, weights[0].expand_as(weights)))
print(f"rank={hvd.rank()} size={hvd.size()} step={state.step} same_weights={same}", flush=True)

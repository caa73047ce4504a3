"""An elastic Horovod synthetic benchmark: a torchvision model trained on random data, as CCE's Horovod image
runs it (``horovodrun ... python pytorch_synthetic_benchmark_elastic.py --num-iters=1000``).

Horovod's source release does not ship its examples, so the test cluster's stand-in for CCE's image carries
this one. It is written on Horovod's elastic API (``hvd.elastic.run``, ``TorchState``, commits, reset
callbacks) and prints the progress lines Horovod's own example prints: the number of workers after every
reset, and ``Iter #N: X img/sec per CPU``. Defaults are small (a ResNet-18 on 64x64 images, 8 per batch), so
that it trains on CPUs.
"""

import argparse
import time
import timeit

import horovod.torch as hvd
import torch
import torch.nn.functional as F
import torch.optim as optim
from torchvision import models


def parse_args():
    parser = argparse.ArgumentParser(description="Elastic PyTorch synthetic benchmark (Horovod)")
    parser.add_argument("--fp16-allreduce", action="store_true", help="compress gradients to fp16 for allreduce")
    parser.add_argument("--model", default="resnet18", help="a torchvision model")
    parser.add_argument("--image-size", type=int, default=64, help="height and width of the random images")
    parser.add_argument("--batch-size", type=int, default=8, help="images per batch and worker")
    parser.add_argument("--num-warmup-batches", type=int, default=2, help="batches before timing starts")
    parser.add_argument("--num-batches-per-iter", type=int, default=2, help="batches per timed iteration")
    parser.add_argument("--num-iters", type=int, default=10, help="timed iterations")
    parser.add_argument("--batches-per-commit", type=int, default=1, help="batches between state commits")
    parser.add_argument("--batches-per-host-check", type=int, default=1, help="batches between host checks")
    parser.add_argument("--no-cuda", action="store_true", help="never use a GPU")
    return parser.parse_args()


def main():
    args = parse_args()
    hvd.init()
    torch.set_num_threads(1)  # as Horovod's own PyTorch examples on CPUs: the workers share the cores
    cuda = not args.no_cuda and torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(hvd.local_rank())
    device = "GPU" if cuda else "CPU"
    torch.manual_seed(42)

    model = getattr(models, args.model)(num_classes=10)
    if cuda:
        model.cuda()
    # The learning rate grows with the workers, as in Horovod's examples; the reset callback keeps it so.
    lr_per_worker = 0.01
    optimizer = optim.SGD(model.parameters(), lr=lr_per_worker * hvd.size())
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    optimizer = hvd.DistributedOptimizer(
        optimizer,
        named_parameters=model.named_parameters(),
        compression=compression,
        backward_passes_per_step=1,
    )

    data = torch.randn(args.batch_size, 3, args.image_size, args.image_size)
    target = torch.randint(0, 10, (args.batch_size,))
    if cuda:
        data, target = data.cuda(), target.cuda()

    def benchmark_step(state):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(data), target)
        loss.backward()
        optimizer.step()
        state.batch += 1
        if state.batch % args.batches_per_commit == 0:
            state.commit()
        elif state.batch % args.batches_per_host_check == 0:
            state.check_host_updates()

    def log(text):
        if hvd.rank() == 0:
            print(text, flush=True)

    @hvd.elastic.run
    def run_benchmark(state):
        log(f"Model: {args.model}")
        log(f"Batch size: {args.batch_size}")
        log(f"Number of {device}s: {hvd.size()}")
        if state.iter == 0:
            log("Running warmup...")
            timeit.timeit(lambda: benchmark_step(state), number=args.num_warmup_batches)
        log("Running benchmark...")
        while state.iter < args.num_iters:
            seconds = timeit.timeit(lambda: benchmark_step(state), number=args.num_batches_per_iter)
            speed = args.batch_size * args.num_batches_per_iter / seconds
            log(f"Iter #{state.iter}: {speed:.1f} img/sec per {device}")
            state.img_secs.append(speed)
            state.iter += 1
        return state.img_secs

    def on_state_reset():
        for group in optimizer.param_groups:
            group["lr"] = lr_per_worker * hvd.size()
        log(f"Workers after the reset: {hvd.size()} ({time.strftime('%H:%M:%S')})")

    state = hvd.elastic.TorchState(model, optimizer, img_secs=[], iter=0, batch=0)
    state.register_reset_callbacks([on_state_reset])
    img_secs = run_benchmark(state)
    if img_secs:
        mean = sum(img_secs) / len(img_secs)
        log(f"Img/sec per {device}: {mean:.1f}")
        log(f"Total img/sec on {hvd.size()} {device}(s): {hvd.size() * mean:.1f}")


if __name__ == "__main__":
    main()

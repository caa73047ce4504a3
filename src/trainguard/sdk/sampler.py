"""``ElasticSampler``: a DataLoader sampler whose epoch survives restarts and changes of world size.

Each epoch is one permutation of ``range(dataset_len)``, fixed by ``(seed, epoch)``
(``torch.randperm`` seeded with ``seed + epoch``, as ``DistributedSampler`` does; identity without shuffle).
The sampler remembers how many samples of that permutation the whole job has consumed, ``consumed``: the
training loop reports progress with ``advance(n)`` after each step (n = samples consumed by all ranks in that
step), and ``state_dict()`` goes into the checkpoint.

Splitting: the not-yet-consumed rest of the permutation is dealt out round-robin, rank ``r`` of ``W`` taking
positions ``r, r + W, r + 2W, ...``. When every rank has taken ``k`` samples, the job has consumed exactly the
first ``k * W`` of the rest, so ``consumed`` is a single number whatever the world size, and a new world (after a
restart or resize) deals out what is left of the epoch: no sample twice, none skipped.

The remainder: when ``W`` does not divide what is left, the first ``left % W`` ranks get one sample more, so a
rank's last batch may be one sample larger, or in rare cases (``left // W`` a multiple of the batch size) the
first ranks get one more batch than the others. Under DDP, wrap the epoch in ``with model.join():`` so that
those ranks do not wait for the others' gradients, or use ``drop_last=True`` in the DataLoader to skip those few
samples of the epoch instead. In live mode, neither: the members agree before each optimizer step with a
collective that ``join()`` does not shadow, so every rank must take the same number of batches. Take
``even_batches(batch_size)`` of them (``itertools.islice``): the first ranks' one sample more waits for the next
epoch's permutation.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from trainguard.sdk._world import current_world


class ElasticSampler:
    """Yields this rank's share of the rest of the current epoch; usable as ``DataLoader(sampler=...)``.

    ``rank`` and ``world_size`` default to torch.distributed's (when initialized) or to the environment.
    """

    def __init__(
        self,
        dataset_len: int,
        shuffle: bool = True,
        seed: int = 0,
        *,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        if dataset_len < 0:
            raise ValueError(f"ElasticSampler(dataset_len={dataset_len}): the length cannot be negative")
        self.dataset_len = dataset_len
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.consumed = 0
        self._order: tuple[int, list[int]] | None = None  # (epoch, permutation), computed once per epoch
        world = current_world()
        self.set_world(
            world.rank if rank is None else rank, world.world_size if world_size is None else world_size
        )

    def set_world(self, rank: int, world_size: int) -> None:
        """Move to a new rank and world size; the next iteration splits the rest of the epoch accordingly."""
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"ElasticSampler: rank {rank} is not in a world of size {world_size}")
        self.rank = rank
        self.world_size = world_size

    def set_epoch(self, epoch: int) -> None:
        """Start ``epoch``; calling it with the epoch already in progress (after a resume) keeps its progress."""
        if epoch != self.epoch:
            self.epoch = epoch
            self.consumed = 0

    def seek(self, epoch: int, consumed: int) -> None:
        """Stand at ``consumed`` samples into ``epoch`` (all ranks together): where the agreed step of a live
        round is (``divmod(step * global_batch, dataset_len)``), whatever this process had advanced to."""
        if not 0 <= consumed <= self.dataset_len or epoch < 0:
            raise ValueError(
                f"ElasticSampler.seek({epoch}, {consumed}): consumed must be 0-{self.dataset_len} and epoch >= 0"
            )
        self.epoch = epoch
        self.consumed = consumed

    def advance(self, n_global_samples: int) -> None:
        """Record that the job consumed ``n_global_samples`` more samples (all ranks together)."""
        if n_global_samples < 0:
            raise ValueError(f"ElasticSampler.advance({n_global_samples}): progress cannot go back")
        self.consumed = min(self.dataset_len, self.consumed + n_global_samples)

    @property
    def remaining(self) -> int:
        """Samples of the epoch not yet consumed by the job."""
        return self.dataset_len - self.consumed

    def even_batches(self, batch_size: int) -> int:
        """Batches of ``batch_size`` that every rank can take from the rest of the epoch: as many as the last rank,
        which has the fewest samples. The others then take at most one sample less than they hold."""
        if batch_size < 1:
            raise ValueError(f"ElasticSampler.even_batches({batch_size}): the batch size must be at least 1")
        fewest = len(range(self.world_size - 1, self.remaining, self.world_size))
        return -(-fewest // batch_size)

    def __len__(self) -> int:
        return len(range(self.rank, self.remaining, self.world_size))

    def __iter__(self) -> Iterator[int]:
        order = self._permutation()
        start = self.consumed + self.rank
        return iter(order[start : self.dataset_len : self.world_size])

    def state_dict(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "consumed": self.consumed,
            "dataset_len": self.dataset_len,
            "shuffle": self.shuffle,
            "seed": self.seed,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume the epoch of ``state``; the dataset length, shuffle and seed must be the ones it was saved with."""
        for key in ("dataset_len", "shuffle", "seed"):
            if state[key] != getattr(self, key):
                raise ValueError(
                    f"ElasticSampler.load_state_dict: the checkpoint has {key}={state[key]!r} but this sampler "
                    f"{key}={getattr(self, key)!r}; the epoch order would differ and samples repeat or go missing. "
                    f"Construct the sampler with {key}={state[key]!r}, or start a new epoch without loading it"
                )
        consumed = int(state["consumed"])
        if not 0 <= consumed <= self.dataset_len:
            raise ValueError(f"ElasticSampler.load_state_dict: consumed={consumed} is outside the dataset")
        self.epoch = int(state["epoch"])
        self.consumed = consumed

    def _permutation(self) -> list[int]:
        if self._order is None or self._order[0] != self.epoch:
            self._order = (self.epoch, _permutation(self.dataset_len, self.shuffle, self.seed + self.epoch))
        return self._order[1]


def _permutation(n: int, shuffle: bool, seed: int) -> list[int]:
    if not shuffle:
        return list(range(n))
    import torch

    generator = torch.Generator()
    generator.manual_seed(seed)
    order: list[int] = torch.randperm(n, generator=generator).tolist()
    return order

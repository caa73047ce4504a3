"""Reading job files. (Stub: the dialect loader replaces this with the full implementation.)

Public surface, stable for the rest of the code base:
- ``load_jobs(path, overlays=()) -> list[LoadedJob]``: every job in a YAML/JSON file, converted to the native
  model, with overlays (ModelArts-style annotation files) applied; raises ``SpecError``.
- ``LoadedJob``: the job, the dialect it came in, the file it came from and any warnings.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from trainguard.api.errors import SpecError
from trainguard.api.model import TrainingJob


@dataclass(frozen=True)
class LoadedJob:
    job: TrainingJob
    dialect: str
    source: str
    warnings: tuple[str, ...] = ()


def load_jobs(path: str | Path, overlays: Sequence[str | Path] = ()) -> list[LoadedJob]:
    text = Path(path).read_text()
    return [
        LoadedJob(TrainingJob.model_validate(doc), "TrainingJob", str(path))
        for doc in yaml.safe_load_all(text)
        if doc is not None
    ] or _empty(path)


def _empty(path: str | Path) -> list[LoadedJob]:
    raise SpecError.single(str(path), "", "the file holds no job")

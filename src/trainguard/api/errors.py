"""Errors in job descriptions: each names the file, the field path and what is allowed."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class SpecProblem:
    """One thing wrong with a job description."""

    file: str
    path: str
    message: str
    #: 1-based line in the file where the field is written, when the file format gives one.
    line: int | None = None

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        if self.path:
            where = f"{where}: {self.path}"
        return f"{where}: {self.message}"


class SpecError(ValueError):
    """A job description that cannot be accepted. Its text is meant for the user, as is."""

    def __init__(self, problems: Iterable[SpecProblem]) -> None:
        self.problems: tuple[SpecProblem, ...] = tuple(problems)
        if not self.problems:
            raise ValueError("SpecError needs at least one problem")
        super().__init__("\n".join(str(p) for p in self.problems))

    @classmethod
    def single(cls, file: str, path: str, message: str) -> SpecError:
        return cls([SpecProblem(file, path, message)])

"""trainguard's own form, ``apiVersion: trainguard.io/v1``, ``kind: TrainingJob``: read as written."""

from __future__ import annotations

from trainguard.api.dialects.base import Conversion, Dialect, value_at
from trainguard.api.documents import Document
from trainguard.api.errors import SpecProblem
from trainguard.api.exitcodes import MAX_EXIT_CODE
from trainguard.api.model import API_VERSION, KIND, TrainingJob


def convert(document: Document) -> Conversion:
    return Conversion(dict(document.data))


def check(job: TrainingJob, document: Document) -> list[SpecProblem]:
    """Codes above 255 cannot occur: in the native form a rule that lists one is a mistake."""
    problems = []
    for role, position, _highest in job.exit_codes_above_limit():
        path = ("spec", "replicaSpecs", role, "faultTolerantPolicy", position, "exitCodes")
        written = value_at(document.data, path)
        shown = ",".join(map(str, written)) if isinstance(written, list) else str(written)
        problems.append(
            document.problem(
                path,
                f'exitCodes "{shown}": codes above {MAX_EXIT_CODE} cannot occur '
                f"(a process exits with 0-{MAX_EXIT_CODE}; 128+N means killed by signal N)",
            )
        )
    return problems


DIALECT = Dialect(name=KIND, api_versions=(API_VERSION,), kind=KIND, convert=convert, check=check)

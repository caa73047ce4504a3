"""The README's first command: a tour of trainguard on this machine.

Today it reads the example jobs in every dialect, shows them in the native form, and asks the policy what it
does for each kind of fault of the seed job. (The real-training demo replaces this once the PyTorch
integration lands.)
"""

from __future__ import annotations

import sys
from pathlib import Path

from trainguard.cli.main import main as trainguard

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "jobs"

#: (role, fault flags) of the seed job asked of `trainguard explain`.
SEED_FAULTS = [
    ("launcher", ["--exit-code", "129"]),
    ("launcher", ["--exit-code", "1"]),
    ("launcher", ["--event", "nodeNotReady"]),
    ("trainer", ["--event", "nodeNotReady"]),
    ("trainer", ["--event", "PodForceDeleted"]),
    ("trainer", ["--exit-code", "137"]),
    ("trainer", ["--exit-code", "137", "--restarts", "100"]),
]


def _step(title: str, argv: list[str]) -> int:
    print(f"\n$ trainguard {' '.join(argv)}    # {title}", flush=True)
    return trainguard(argv)


def main() -> int:
    seed = str(EXAMPLES / "seed-000-aitrainingjob.yaml")
    jobs = sorted(str(path) for path in EXAMPLES.glob("*.yaml"))
    failures = _step("every example job, in its own dialect", ["validate", *jobs])
    failures += _step(
        "a PyTorchJob with ModelArts annotations laid over it",
        [
            "validate",
            str(EXAMPLES / "pytorchjob-elastic.yaml"),
            "--overlay",
            str(EXAMPLES / "modelarts-overlay.json"),
        ],
    )
    failures += _step("the seed AITrainingJob in trainguard's native form", ["convert", seed, "-o", "yaml"])
    for role, fault in SEED_FAULTS:
        failures += _step(
            f"what happens to a {role} on this fault", ["explain", seed, "--role", role, *fault]
        )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

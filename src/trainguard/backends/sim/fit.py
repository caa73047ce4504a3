"""The best checkpoint interval of a run, read off a curve fitted to its goodput.

Goodput against the interval is flat near its top, so the highest simulated point wanders with the luck of
where faults fell. The lost share of time has the shape a/τ + b·τ + c (checkpoints, rework, the rest); a
least-squares fit of that shape over τ*/4..4τ* (τ* for the MTBF the run saw) puts the optimum at √(a/b),
which is far steadier. A fit whose optimum falls outside that range gives way to the highest point.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from trainguard.backends.sim.run import RunResult

SPAN = 4.0
POINTS = 41


def fitted_best_interval(result: RunResult) -> float:
    center = result.search_center()
    points = result.curve(center / SPAN, center * SPAN, POINTS)
    coefficients = _least_squares([(1 / tau, tau, 1.0) for tau, _ in points], [1 - g for _, g in points])
    if coefficients is not None and coefficients[0] > 0 and coefficients[1] > 0:
        best = math.sqrt(coefficients[0] / coefficients[1])
        if center / SPAN <= best <= center * SPAN:
            return best
    return result.best_interval()[0]


def _least_squares(rows: Sequence[tuple[float, float, float]], values: Sequence[float]) -> list[float] | None:
    """x minimizing |A x - y| for three unknowns (normal equations, Gaussian elimination with pivoting)."""
    size = 3
    matrix = [
        [sum(row[i] * row[j] for row in rows) for j in range(size)]
        + [sum(row[i] * y for row, y in zip(rows, values, strict=True))]
        for i in range(size)
    ]
    for column in range(size):
        pivot = max(range(column, size), key=lambda r: abs(matrix[r][column]))
        if abs(matrix[pivot][column]) < 1e-300:
            return None
        matrix[column], matrix[pivot] = matrix[pivot], matrix[column]
        for r in range(size):
            if r != column:
                factor = matrix[r][column] / matrix[column][column]
                matrix[r] = [a - factor * b for a, b in zip(matrix[r], matrix[column], strict=True)]
    return [matrix[i][size] / matrix[i][i] for i in range(size)]

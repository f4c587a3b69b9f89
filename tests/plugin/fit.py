"""Least squares from the plugin's step sums, for the tests (the advisor's reader comes later)."""

from __future__ import annotations


def solve3(m: list[list[float]], y: list[float]) -> list[float]:
    """Solve the 3x3 normal equations ``m x = y`` by Cramer's rule (no numpy in the test venv)."""

    def det(x: list[list[float]]) -> float:
        return (
            x[0][0] * (x[1][1] * x[2][2] - x[1][2] * x[2][1])
            - x[0][1] * (x[1][0] * x[2][2] - x[1][2] * x[2][0])
            + x[0][2] * (x[1][0] * x[2][1] - x[1][1] * x[2][0])
        )

    d = det(m)
    out = []
    for col in range(3):
        mc = [row[:] for row in m]
        for r in range(3):
            mc[r][col] = y[r]
        out.append(det(mc) / d)
    return out

"""Least squares without numpy (not a dependency): normal equations, Gaussian elimination, and an
active set that keeps every coefficient non-negative (a step cannot get faster with more work)."""

from __future__ import annotations


def solve(a: list[list[float]], b: list[float]) -> list[float] | None:
    """x with a x = b by Gaussian elimination with partial pivoting; None when a is singular."""
    n = len(b)
    m = [[*row, b[i]] for i, row in enumerate(a)]
    scale = max((abs(v) for row in a for v in row), default=0.0) or 1.0
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        if abs(m[pivot][col]) <= 1e-12 * scale:
            return None
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(col + 1, n):
            f = m[r][col] / m[col][col]
            if f:
                for c in range(col, n + 1):
                    m[r][c] -= f * m[col][c]
    x = [0.0] * n
    for r in range(n - 1, -1, -1):
        x[r] = (m[r][n] - sum(m[r][c] * x[c] for c in range(r + 1, n))) / m[r][r]
    return x


def least_squares(rows: list[list[float]], y: list[float], free: list[bool]) -> list[float] | None:
    """Minimise |rows x - y|^2 over the columns marked free (others fixed at 0)."""
    cols = [j for j, f in enumerate(free) if f]
    if not cols or len(rows) < len(cols):
        return None
    ata = [[sum(r[i] * r[j] for r in rows) for j in cols] for i in cols]
    aty = [sum(r[i] * v for r, v in zip(rows, y, strict=True)) for i in cols]
    sol = solve(ata, aty)
    if sol is None:
        return None
    out = [0.0] * len(free)
    for j, v in zip(cols, sol, strict=True):
        out[j] = v
    return out


def nonnegative_least_squares(rows: list[list[float]], y: list[float], usable: list[bool]) -> list[float] | None:
    """Least squares with x >= 0: drop the most negative coefficient and refit until none is negative.

    Columns that are all zero in `rows` (the data cannot see them) are left out from the start."""
    free = [u and any(abs(r[j]) > 0 for r in rows) for j, u in enumerate(usable)]
    while any(free):
        x = least_squares(rows, y, free)
        if x is None:
            # Collinear columns: drop the last free one (the most specific feature) and retry.
            last = max(j for j, f in enumerate(free) if f)
            free[last] = False
            continue
        worst = min(range(len(x)), key=lambda j: x[j])
        if x[worst] >= 0:
            return x
        free[worst] = False
    return None

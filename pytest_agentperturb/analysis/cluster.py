"""Average-linkage clustering of a small distance matrix and its leaf order, in numpy.

Orders the cross-family correlation matrix (:mod:`.sensitivity`) and lays
out its dendrogram (:mod:`pytest_agentperturb.report.svg`).  The result is
the linkage matrix of ``scipy.cluster.hierarchy.linkage(method="average")``
and the order of ``leaves_list``, value for value and row for row (ties
included: the tests compare both on random and tied matrices), computed
here so that a report does not import scipy's clustering and spatial
packages for a matrix of at most a few dozen rows.

The merges follow the nearest-neighbour chain: from the lowest-numbered
live cluster, step to its nearest neighbour (the chain's previous cluster
wins a tie, then the lowest index) until two clusters are each other's
nearest; merge them into the slot of the higher index, the new distance to
every other cluster being the size-weighted mean of the two old ones.  The
merges are then sorted by height (stably) and labelled: a merge's two
children are listed lower label first, and the k-th merge of n leaves
creates cluster n + k.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


def average_linkage(dist: npt.ArrayLike) -> FloatArray:
    """The (n - 1, 4) linkage matrix [child a, child b, height, size] of a symmetric (n, n) distance matrix.

    Only the upper triangle is read (the diagonal is ignored).  Raises
    ValueError for a non-square matrix or a non-finite distance.
    """
    d = np.array(dist, dtype=float)
    if d.ndim != 2 or d.shape[0] != d.shape[1]:
        raise ValueError(f"a square distance matrix is needed, got shape {d.shape}")
    n = d.shape[0]
    if n < 2:
        return np.zeros((0, 4))
    iu = np.triu_indices(n, 1)
    if not np.isfinite(d[iu]).all():
        raise ValueError("distances must be finite")
    full = [[0.0] * n for _ in range(n)]
    for i, j, v in zip(iu[0].tolist(), iu[1].tolist(), d[iu].tolist()):
        full[i][j] = full[j][i] = v
    size = [1] * n
    merges: list[tuple[int, int, float, int]] = []
    chain: list[int] = []
    for _ in range(n - 1):
        if not chain:
            chain.append(next(i for i in range(n) if size[i]))
        while True:
            x = chain[-1]
            y, best = (chain[-2], full[x][chain[-2]]) if len(chain) > 1 else (-1, float("inf"))
            for i in range(n):
                if size[i] and i != x and full[x][i] < best:
                    best, y = full[x][i], i
            if len(chain) > 1 and y == chain[-2]:
                break
            chain.append(y)
        del chain[-2:]
        x, y = min(x, y), max(x, y)
        nx, ny = size[x], size[y]
        merges.append((x, y, best, nx + ny))
        size[x], size[y] = 0, nx + ny
        for i in range(n):
            if size[i] and i != y:
                full[i][y] = full[y][i] = (nx * full[i][x] + ny * full[i][y]) / (nx + ny)
    merges.sort(key=lambda m: m[2])   # stable: equal heights keep the order they were merged in
    parent = list(range(2 * n - 1))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    z = np.zeros((n - 1, 4))
    sizes = [1] * n + [0] * (n - 1)
    for k, (x, y, h, _) in enumerate(merges):
        a, b = sorted((root(x), root(y)))
        parent[a] = parent[b] = n + k
        sizes[n + k] = sizes[a] + sizes[b]
        z[k] = (a, b, h, sizes[n + k])
    return z


def leaves(z: npt.ArrayLike) -> list[int]:
    """The leaves of a linkage matrix from left to right (each merge: its first child, then its second)."""
    zz = np.asarray(z, dtype=float)
    n = len(zz) + 1
    if not len(zz):
        return [0] if n == 1 else []
    out: list[int] = []
    stack = [2 * n - 2]
    while stack:
        c = stack.pop()
        if c < n:
            out.append(c)
        else:
            a, b = int(zz[c - n, 0]), int(zz[c - n, 1])
            stack += [b, a]
    return out

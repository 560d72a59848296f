"""Defaults of the analysis' random draws, importable without numpy (the task pages' worker needs none)."""

from __future__ import annotations

#: Default number of random assignments of the permutation test.
N_PERMUTATIONS = 100_000
#: Default number of bootstrap replicates.
N_BOOTSTRAP = 2000

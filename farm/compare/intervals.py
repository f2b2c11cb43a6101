"""Many cells' median intervals at once: `farm.measure.median_confidence_interval`'s rule (the
order-statistic interval at the effective sample size, widened to the t-interval of the repeats'
medians), computed with array operations over every cell's samples together rather than a cell
at a time (a comparison of two 2,500-cell sweeps: 5,000 intervals in a fraction of a second, not
6 s). tests/test_compare.py checks it against the one-cell function on varied samples.

Input: one row per sample, grouped by cell (`group`: 0, 1, ... non-decreasing), in each cell's
query order (the order of its file); `repeat` (nulls as 0) and `latency_ms`.
"""

from __future__ import annotations

import math

import numpy as np

from farm.compare.stats import MedianInterval


def _segments(*keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(start, length) of each run of rows whose `keys` are all equal (rows sorted by them)."""
    changed = np.zeros(keys[0].size - 1, dtype=bool)
    for key in keys:
        changed |= key[1:] != key[:-1]
    starts = np.flatnonzero(np.r_[True, changed])
    return starts, np.diff(np.r_[starts, keys[0].size])


def _medians(sorted_values: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """np.median of each segment of values sorted within segments."""
    low = sorted_values[starts + (lengths - 1) // 2]
    high = sorted_values[starts + lengths // 2]
    return np.where(lengths % 2 == 1, low, (low + high) / 2)


def _order_within(x: np.ndarray, segment: np.ndarray) -> np.ndarray:
    """The order that sorts x within each segment (`segment`: non-decreasing per row), segments
    kept in order: np.lexsort((x, segment))'s values, without lexsort's slow float key (0.17 s
    for 500,000 rows)."""
    if x.size == 0:
        return np.zeros(0, dtype=np.int64)
    sizes = np.bincount(segment)
    if (sizes == sizes[0]).all():  # equal segments (the usual): one row each
        width = int(sizes[0])
        return (np.argsort(x.reshape(sizes.size, width), axis=1) + (np.arange(sizes.size) * width)[:, None]).ravel()
    rank = np.empty(x.size, dtype=np.int64)
    rank[np.argsort(x)] = np.arange(x.size)
    return np.argsort(segment.astype(np.int64) * x.size + rank)


def _inflation(below: np.ndarray, run_of_row: np.ndarray, run_start: np.ndarray, run_len: np.ndarray,
               run_group: np.ndarray, p: np.ndarray, block: np.ndarray) -> np.ndarray:
    """Per cell, the batch-means estimate of the sign process's variance inflation at block length
    `block` (per cell); NaN where the cell has fewer than two blocks (`effective_sample_size`)."""
    b_run = block[run_group]
    full = run_len // b_run  # whole blocks per run
    offset = np.r_[0, np.cumsum(full)[:-1]]
    position = np.arange(below.size) - run_start[run_of_row]
    keep = position < (full * b_run)[run_of_row]
    block_id = offset[run_of_row[keep]] + position[keep] // b_run[run_of_row[keep]]
    sums = np.bincount(block_id, weights=below[keep], minlength=int(full.sum()))
    block_group = np.repeat(run_group, full)
    means = sums / block[block_group]
    count = np.bincount(block_group, minlength=p.size)
    squares = np.zeros(p.size)
    if means.size:  # summed as np.mean sums (pairwise, per cell): the same float as the one-cell rule
        first = np.r_[0, np.cumsum(count)[:-1]]
        some = count > 0
        squares[some] = np.add.reduceat((means - p[block_group]) ** 2, first[some])
    with np.errstate(divide="ignore", invalid="ignore"):
        estimate = block * (squares / count) / (p * (1 - p))
    return np.where(count >= 2, estimate, np.nan)


def binom_ppf(q: float, m: np.ndarray) -> np.ndarray:
    """scipy.stats.binom.ppf(q, m, 0.5) (the smallest k whose binomial CDF reaches q), by bisection
    on scipy.special.bdtr: scipy.stats costs 1.3 s to import, scipy.special 0.3 s (the same
    figures: tests/test_compare.py)."""
    from scipy import special

    m, back = np.unique(m, return_inverse=True)  # a few sizes among thousands of cells
    low, high = np.zeros_like(m), m.copy()  # the CDF at m is 1
    while (active := low < high).any():
        middle = (low + high) // 2
        enough = special.bdtr(middle, m, 0.5) >= q
        high = np.where(active & enough, middle, high)
        low = np.where(active & ~enough, middle + 1, low)
    return low[back.reshape(-1)]


def t_ppf(q: float, df: np.ndarray) -> np.ndarray:
    """scipy.stats.t.ppf(q, df), as scipy computes it."""
    from scipy import special

    return special.stdtrit(df, q)


def median_intervals(group: np.ndarray, repeat: np.ndarray, latency_ms: np.ndarray,
                     groups: int) -> list[MedianInterval | None]:
    """Per group 0..groups-1: its MedianInterval ('samples'), None where it has no finite sample."""
    from farm.measure import CI_LEVEL

    finite = np.isfinite(latency_ms)
    group, repeat, x = group[finite], repeat[finite].astype(np.int64), latency_ms[finite].astype(np.float64)
    if x.size == 0:
        return [None] * groups
    n = np.bincount(group, minlength=groups)
    start = np.r_[0, np.cumsum(n)[:-1]]
    has = n > 0
    by_value = _order_within(x, group)
    ordered = x[by_value]
    median = np.full(groups, np.nan)
    median[has] = _medians(ordered, start[has], n[has])
    # each run's values sorted: the rows in value order, then stably by cell and repeat (integer keys: fast)
    per_run = x[by_value[np.lexsort((repeat[by_value], group[by_value]))]]
    # runs: each cell's repeats, each in query order (a stable sort)
    order = np.lexsort((repeat, group))
    group, repeat, x = group[order], repeat[order], x[order]
    below = (x <= median[group]).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.bincount(group, weights=below, minlength=groups) / n
    run_start, run_len = _segments(group, repeat)
    run_group = group[run_start]
    run_of_row = np.repeat(np.arange(run_start.size), run_len)
    shortest = np.full(groups, np.iinfo(np.int64).max)
    np.minimum.at(shortest, run_group, run_len)
    estimates = [np.ones(groups)]
    for exponent in (1 / 2, 2 / 3):
        raw = np.array([int(v ** exponent) for v in n.tolist()], dtype=np.int64)
        block = np.maximum(np.minimum(raw, shortest), 1)
        estimates.append(_inflation(below, run_of_row, run_start, run_len, run_group, p, block))
    inflation = np.fmax.reduce(np.vstack(estimates), axis=0)
    ess = np.where(p * (1 - p) == 0, n, np.maximum(n / inflation, 1.0))
    m = np.maximum(np.floor(ess).astype(np.int64), 1)
    k = binom_ppf((1 - CI_LEVEL) / 2, m)
    rank = np.minimum(np.maximum(np.floor(k * n / m).astype(np.int64), 1), (n + 1) // 2)
    last = x.size - 1
    low = np.where(has, ordered[np.clip(start + rank - 1, 0, last)], np.nan)
    high = np.where(has, ordered[np.clip(start + n - rank, 0, last)], np.nan)
    run_median = _medians(per_run, run_start, run_len)
    repeats = np.bincount(run_group, minlength=groups)
    low, high = _widen(low, high, median, run_median, run_group, repeats, CI_LEVEL)
    return [MedianInterval(*figures[:3], "samples", *figures[3:]) if found else None
            for found, *figures in zip(has.tolist(), median.tolist(), low.tolist(), high.tolist(), n.tolist(),
                                       repeats.tolist())]


def _widen(low: np.ndarray, high: np.ndarray, median: np.ndarray, run_median: np.ndarray, run_group: np.ndarray,
           repeats: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray]:
    """At least the t-interval of the repeats' medians (log scale), for cells of two or more repeats
    whose repeat medians are all positive."""
    groups = repeats.size
    smallest = np.full(groups, np.inf)
    np.minimum.at(smallest, run_group, run_median)
    widen = (repeats >= 2) & (smallest > 0)
    if not widen.any():
        return low, high
    logs = np.log(np.where(run_median > 0, run_median, 1.0))
    mean = np.bincount(run_group, weights=logs, minlength=groups) / np.maximum(repeats, 1)
    squares = np.bincount(run_group, weights=(logs - mean[run_group]) ** 2, minlength=groups)
    low, high = low.copy(), high.copy()
    r = repeats[widen].astype(np.float64)
    t = t_ppf(1 - (1 - level) / 2, np.maximum(repeats[widen] - 1, 1))
    half = t * np.sqrt(squares[widen] / (r - 1)) / np.sqrt(r)  # sqrt is exact: math.sqrt's figures
    # math.exp, as the one-cell rule (numpy's exp may differ from it in the last bit)
    down = np.array([math.exp(-h) for h in half.tolist()])
    up = np.array([math.exp(h) for h in half.tolist()])
    low[widen] = np.minimum(low[widen], median[widen] * down)
    high[widen] = np.maximum(high[widen], median[widen] * up)
    return low, high

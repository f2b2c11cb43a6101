"""The noise test: is one cell's median latency really different from another's?

B's median over A's, with a 95 % interval for that ratio from each median's own interval
(`median_ratio`), and a verdict that needs both the interval to exclude 1 and the change to be
at least `MIN_EFFECT_PERCENT` (`noise_verdict`). docs/dashboard.md defines "within noise" with it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

# A change in median latency counts ("faster"/"slower") only when the 95 % interval of the ratio of
# the two medians excludes 1 and the ratio itself is at least this far from 1: smaller changes are
# real for a large enough sample but too small to decide on (run-to-run and machine-to-machine
# differences are of this order). docs/dashboard.md defines "within noise" with it.
MIN_EFFECT_PERCENT = 2.0
Z_95 = 1.959963984540054  # standard normal 97.5 % quantile: a two-sided 95 % interval


def median_ratio(median_a: Any, low_a: Any, high_a: Any, median_b: Any, low_b: Any, high_b: Any) -> tuple:
    """B's median latency over A's, and a 95 % interval for that ratio, from each median's own 95 %
    interval. Numbers or arrays.

    Each interval is read as a standard error on the log scale, se = (log high - log low) / (2 z),
    and the two combine as independent: log ratio +- z * sqrt(se_a^2 + se_b^2). The per-cell
    intervals are the order-statistic ones of farm.measure (distribution-free, widened for
    autocorrelated queries), so the test uses both cells' samples at the cost of one sort each, is
    deterministic, and needs no resampling: a Compare page over hundreds of cells stays quick.
    Testing the ratio (rather than whether the two intervals overlap) keeps its 95 % level; overlap
    is a test at about 99.5 %, and useless with wide intervals. A bound that is missing, not
    positive, or not around its median gives a NaN interval (the difference cannot be judged)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        arrays = [np.asarray(pd.to_numeric(pd.Series(np.atleast_1d(v), dtype=object), errors="coerce"),
                             dtype=np.float64) for v in (median_a, low_a, high_a, median_b, low_b, high_b)]
        ma, la, ha, mb, lb, hb = arrays
        valid = (la > 0) & (lb > 0) & (la <= ma) & (ma <= ha) & (lb <= mb) & (mb <= hb)
        se = np.sqrt(((np.log(ha) - np.log(la)) / (2 * Z_95)) ** 2 + ((np.log(hb) - np.log(lb)) / (2 * Z_95)) ** 2)
        log_ratio = np.log(mb) - np.log(ma)
        ratio = mb / ma
        low = np.where(valid, np.exp(log_ratio - Z_95 * se), np.nan)
        high = np.where(valid, np.exp(log_ratio + Z_95 * se), np.nan)
    if np.ndim(median_a) == 0 and np.ndim(median_b) == 0:
        return float(ratio[0]), float(low[0]), float(high[0])
    return ratio, low, high


def noise_verdict(ratio: Any, low: Any, high: Any, min_effect_percent: float = MIN_EFFECT_PERCENT) -> Any:
    """'faster' / 'slower' (B's latency against A's) when the ratio's interval excludes 1 and the
    ratio is at least `min_effect_percent` from 1; 'within noise' otherwise; 'not judged' where a
    cell has no usable interval (nothing says how noisy it was). Numbers or arrays (then an array
    of strings)."""
    ratio, low, high = (np.asarray(v, dtype=np.float64) for v in (ratio, low, high))
    effect = np.abs(ratio - 1) * 100 >= min_effect_percent
    verdict = np.where(effect & (high < 1) & (ratio < 1), "faster",
                       np.where(effect & (low > 1) & (ratio > 1), "slower",
                                np.where(np.isnan(low) | np.isnan(high), "not judged", "within noise")))
    return str(verdict) if verdict.ndim == 0 else verdict.astype(object)


def compare_samples(a: Any, b: Any, repeat_a: Any = None, repeat_b: Any = None) -> tuple[float, float, float, str]:
    """The ratio of medians (B over A), its 95 % interval and the verdict, from two sets of raw
    latencies (repeat numbers optional: one repeat)."""
    from farm.measure import median_confidence_interval

    figures = []
    for values, repeat in ((a, repeat_a), (b, repeat_b)):
        values = np.asarray(values, dtype=np.float64)
        repeat = np.zeros(len(values), dtype=np.int64) if repeat is None else np.asarray(repeat)
        low, high, _ = median_confidence_interval(values, repeat)
        figures += [float(np.nanmedian(values)), low, high]
    ratio, low, high = median_ratio(*figures)
    return ratio, low, high, noise_verdict(ratio, low, high)


def intervals_overlap(low: Any, high: Any, other_low: Any, other_high: Any) -> Any:
    """Whether [low, high] and [other_low, other_high] overlap. Works on numbers and, element by
    element, on Series; a missing bound never overlaps (a comparison with NaN is False). No longer
    the noise test (that is `median_ratio` + `noise_verdict`)."""
    return (low <= other_high) & (other_low <= high)

"""The verdict of one matched pair: is NEW's median latency really different from BASE's, by
enough to matter?

The effect is the ratio of the two medians less one (NEW / BASE - 1). Its 95 % interval comes
from each median's own 95 % interval, `farm.measure.median_confidence_interval`: the
distribution-free order-statistic interval at the effective sample size (widened for
autocorrelated queries) and at least the t-interval of the repeats' medians (how far a whole run
moves). Each interval is read on the log scale, each side as its own standard error (the
intervals are skewed), and the two medians as independent:

    lower = log(m_new / m_base) - sqrt(below_new^2 + above_base^2)
    upper = log(m_new / m_base) + sqrt(above_new^2 + below_base^2)

where below = log(median / low) and above = log(high / median). The dashboard's noise test
(farm.dashboard.noise.median_ratio) uses the symmetric form of the same rule.

The verdict is an equivalence test against a minimum effect that matters (3 % by default):
'slower' only when the whole interval lies above +min, 'faster' only when it lies below -min,
'within noise' when it lies inside [-min, +min], and 'inconclusive' otherwise (the data cannot
tell a change of that size from none: more repeats, or a quieter machine, would).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

MIN_EFFECT_PERCENT = 3.0
SLOWER, FASTER, WITHIN_NOISE = "slower", "faster", "within noise"
INCONCLUSIVE, NOT_JUDGED = "inconclusive", "not judged"


class MedianInterval(NamedTuple):
    """A cell's median latency and its 95 % interval (ms); `basis`: 'samples' (computed from the
    raw samples) or 'stored' (the measurements row's, for a cell without samples). A named tuple,
    as Effect: a comparison makes 75,000 of them for 25,000 pairs, three times faster than a
    frozen dataclass builds them."""

    median: float
    low: float
    high: float
    basis: str
    queries: int = 0
    repeats: int = 0

    @property
    def usable(self) -> bool:
        return 0 < self.low <= self.median <= self.high < math.inf  # NaN compares False: all finite


class Effect(NamedTuple):
    """NEW against BASE: the effect (NEW / BASE - 1, a fraction), its 95 % interval, the verdict."""

    effect: float
    low: float
    high: float
    verdict: str


def median_interval(latency_ms: Any, repeat: Any = None) -> MedianInterval | None:
    """The median of raw latencies and its 95 % interval (farm.measure's rule, repeats included);
    None without a finite sample."""
    from farm.measure import median_confidence_interval

    values = np.asarray(latency_ms, dtype=np.float64)
    repeats = np.zeros(len(values), dtype=np.int64) if repeat is None else np.asarray(repeat)
    finite = np.isfinite(values)
    values, repeats = values[finite], repeats[finite]
    if values.size == 0:
        return None
    low, high, _ = median_confidence_interval(values, repeats)
    return MedianInterval(float(np.median(values)), float(low), float(high), "samples", int(values.size),
                          int(len(np.unique(repeats))))


def effect_interval(base: MedianInterval | None, new: MedianInterval | None,
                    min_effect_percent: float = MIN_EFFECT_PERCENT) -> Effect:
    """The effect of NEW against BASE with its 95 % interval and verdict ('not judged' where either
    side has no usable interval: nothing says how noisy it was)."""
    if base is None or new is None or not base.usable or not new.usable:
        effect = new.median / base.median - 1 if base and new and base.median > 0 else math.nan
        return Effect(effect, math.nan, math.nan, NOT_JUDGED)
    log_ratio = math.log(new.median / base.median)
    below = math.hypot(math.log(new.median / new.low), math.log(base.high / base.median))
    above = math.hypot(math.log(new.high / new.median), math.log(base.median / base.low))
    low, high = math.exp(log_ratio - below) - 1, math.exp(log_ratio + above) - 1
    return Effect(math.exp(log_ratio) - 1, low, high, verdict(low, high, min_effect_percent))


def verdict(low: float, high: float, min_effect_percent: float = MIN_EFFECT_PERCENT) -> str:
    """The verdict of an effect interval [low, high] (fractions) against the minimum effect."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return NOT_JUDGED
    bound = min_effect_percent / 100
    if low > bound:
        return SLOWER
    if high < -bound:
        return FASTER
    if -bound <= low and high <= bound:
        return WITHIN_NOISE
    return INCONCLUSIVE


def ratio_change(new: Any, base: Any) -> float | None:
    """NEW / BASE - 1 of two figures (throughput, p99, energy), or None without both (or a base
    that is not positive)."""
    try:
        new, base = float(new), float(base)
    except (TypeError, ValueError):
        return None
    if not (math.isfinite(new) and math.isfinite(base)) or base <= 0:
        return None
    return new / base - 1

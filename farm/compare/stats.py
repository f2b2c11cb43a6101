"""farm's one rule for "is NEW faster or slower than BASE?": every page of the dashboard, `farm
report` and `farm compare` judge a pair of latencies with it, and docs/dashboard.md ("Definitions")
states it.

The effect is the ratio of the two medians (NEW / BASE). Its 95 % interval comes from each
median's own 95 % interval, `farm.measure.median_confidence_interval`: the distribution-free
order-statistic interval at the effective sample size (widened for autocorrelated queries) and at
least the t-interval of the repeats' medians (how far a whole run moves). Each interval is read on
the log scale, each side as its own standard error (the intervals are skewed), and the two medians
as independent:

    lower = log(m_new / m_base) - sqrt(below_new^2 + above_base^2)
    upper = log(m_new / m_base) + sqrt(above_new^2 + below_base^2)

where below = log(median / low) and above = log(high / median). Where the warehouse holds several
runs of the configuration, how far a run's median moves about its level (farm.compare.between)
joins each side as a third term: the two runs' own samples cannot show that the machine's speed
moved between them.

The verdict is an equivalence test against a minimum effect that matters (3 % by default):
'slower' only when the whole interval lies above +min, 'faster' only when it lies below -min,
'within noise' when it lies inside [-min, +min], 'inconclusive' otherwise (the data cannot tell a
change of that size from none: more repeats, or a quieter machine, would), and 'not judged' where a
median has no usable interval (nothing says how noisy it was).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

MIN_EFFECT_PERCENT = 3.0
Z95 = 1.959964  # the normal quantile of a two-sided 95 % interval
SLOWER, FASTER, WITHIN_NOISE = "slower", "faster", "within noise"
INCONCLUSIVE, NOT_JUDGED = "inconclusive", "not judged"
UNDECIDED = (WITHIN_NOISE, INCONCLUSIVE, NOT_JUDGED)  # no change that matters shown: shown in grey
# The rule in one sentence, for the pages and the report that show its verdicts.
RULE_TEXT = (f"faster / slower: the 95 % interval of the ratio of the two median latencies lies wholly beyond "
             f"±{MIN_EFFECT_PERCENT:g} %; within noise: wholly inside it; inconclusive: neither (the samples "
             f"cannot tell); not judged: a cell has no interval")


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
                    min_effect_percent: float = MIN_EFFECT_PERCENT, run_spread: float = 0.0) -> Effect:
    """The effect of NEW against BASE with its 95 % interval and verdict ('not judged' where either
    side has no usable interval: nothing says how noisy it was). `run_spread`: how far a run's
    median moves about the configuration's level (log-scale standard deviation, from the
    warehouse's history: farm.compare.between); each of the two runs adds it, so the interval
    widens by 1.96 x sqrt(2) x it on each side, combined with the samples' own."""
    if base is None or new is None or not base.usable or not new.usable:
        effect = new.median / base.median - 1 if base and new and base.median > 0 else math.nan
        return Effect(effect, math.nan, math.nan, NOT_JUDGED)
    log_ratio = math.log(new.median / base.median)
    between = Z95 * math.sqrt(2) * run_spread
    below = math.hypot(math.log(new.median / new.low), math.log(base.high / base.median), between)
    above = math.hypot(math.log(new.high / new.median), math.log(base.median / base.low), between)
    low, high = math.exp(log_ratio - below) - 1, math.exp(log_ratio + above) - 1
    return Effect(math.exp(log_ratio) - 1, low, high, verdict(low, high, min_effect_percent))


def ratio_interval(base_median: Any, base_low: Any, base_high: Any, new_median: Any, new_low: Any,
                   new_high: Any) -> tuple[Any, Any, Any]:
    """NEW's median over BASE's and the ratio's 95 % interval (`effect_interval`'s, plus one), for
    numbers or arrays (Series) of medians and their intervals: the dashboard's form. A bound that is
    missing, not positive or not around its median gives a NaN interval."""
    import pandas as pd

    mb, lb, hb, mn, ln, hn = (np.asarray(pd.to_numeric(pd.Series(np.atleast_1d(v), dtype=object), errors="coerce"),
                                         dtype=np.float64)
                              for v in (base_median, base_low, base_high, new_median, new_low, new_high))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = mn / mb
    effects = [effect_interval(MedianInterval(*base, "stored"), MedianInterval(*new, "stored"))
               for base, new in zip(zip(mb.tolist(), lb.tolist(), hb.tolist()), zip(mn.tolist(), ln.tolist(), hn.tolist()))]
    low = np.array([e.low + 1 for e in effects], dtype=np.float64)
    high = np.array([e.high + 1 for e in effects], dtype=np.float64)
    if np.ndim(base_median) == 0 and np.ndim(new_median) == 0:
        return float(ratio[0]), float(low[0]), float(high[0])
    return ratio, low, high


def verdicts(ratio_low: Any, ratio_high: Any, min_effect_percent: float = MIN_EFFECT_PERCENT) -> Any:
    """`verdict` of ratio intervals (NEW / BASE, not less one), for numbers or arrays (then an
    array of strings)."""
    low, high = np.broadcast_arrays(np.asarray(ratio_low, dtype=np.float64) - 1,
                                    np.asarray(ratio_high, dtype=np.float64) - 1)
    out = np.array([verdict(lo, hi, min_effect_percent) for lo, hi in zip(low.ravel().tolist(), high.ravel().tolist())],
                   dtype=object).reshape(low.shape)
    return str(out) if out.ndim == 0 else out


def compare_latencies(base_ms: Any, new_ms: Any, base_repeat: Any = None, new_repeat: Any = None) -> Effect:
    """NEW against BASE from two sets of raw latencies (repeat numbers optional: one repeat)."""
    return effect_interval(median_interval(base_ms, base_repeat), median_interval(new_ms, new_repeat))


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


def finite(value: Any) -> float | None:
    """A warehouse value as a finite float, or None (missing, NaN, infinite, or not a number)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


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

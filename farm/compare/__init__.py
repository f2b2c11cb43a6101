"""`farm compare BASE NEW`: two runs of a sweep, cell by cell, with noise-aware verdicts.

`compare_sweeps` matches the two sweeps' cells by configuration (`match`), judges each pair from
both cells' raw samples (`stats`: the ratio of medians and its 95 % interval against a minimum
effect), finds the layers that explain each slower cell (`layers`), and returns a `Comparison`;
`render` writes it as JSON (`to_dict`), Markdown (`render_markdown`) and HTML (`render_html`).
The command (farm.cli.compare), the dashboard's Regressions page and `farm report` all call these.
"""

from farm.compare.core import Comparison, PairResult, cell_label, compare_sweeps
from farm.compare.render import render_html, render_markdown, summary_line, to_dict
from farm.compare.stats import (
    FASTER,
    INCONCLUSIVE,
    MIN_EFFECT_PERCENT,
    NOT_JUDGED,
    SLOWER,
    WITHIN_NOISE,
    Effect,
    MedianInterval,
    effect_interval,
    median_interval,
    verdict,
)

__all__ = ["FASTER", "INCONCLUSIVE", "MIN_EFFECT_PERCENT", "NOT_JUDGED", "SLOWER", "WITHIN_NOISE", "Comparison",
           "Effect", "MedianInterval", "PairResult", "cell_label", "compare_sweeps", "effect_interval",
           "median_interval", "render_html", "render_markdown", "summary_line", "to_dict", "verdict"]

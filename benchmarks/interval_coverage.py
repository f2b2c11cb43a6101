"""Do the farm's intervals and verdicts keep their promises on latencies that behave like real ones?

Simulated cells: log-normal latencies (sd 5 % of the median) whose logs are an AR(1) process
(consecutive queries alike, phi), in 3 repeats (--repeats) of 300 queries, each repeat at its own level drawn
with sd tau (what moves between runs: clocks, placement, a neighbour's load). The target is the
median a run-to-run average gives (1.0). For each (tau, phi) it prints:

  - coverage of the 95 % median interval from the samples alone (`across_repeats=False`) and the
    farm's (samples, widened to the repeats' t-interval where they disagree more): should be >= 0.95;
  - their mean width, as a share of the median;
  - the false-verdict rate: two cells of the same configuration compared as the dashboard and
    `farm compare` do (farm.compare.stats: ratio_interval and verdicts, 3 % minimum effect):
    'faster' or 'slower' should come out at most about 5 % of the time ('inconclusive' is no error);
  - the power: the same, when the second cell is truly 10 % slower (share called 'slower').

    .venv/bin/python benchmarks/interval_coverage.py [--draws 300] [--repeats 3]
    .venv/bin/python benchmarks/interval_coverage.py --quick     # the test suite runs this
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from farm.compare.stats import ratio_interval, verdicts  # noqa: E402
from farm.measure import median_confidence_interval  # noqa: E402

SIGMA = 0.05  # the queries' own spread (log scale)


def draw_cell(rng: np.random.Generator, tau: float, phi: float, repeats: int, queries: int,
              level: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """(latency, repeat) of one simulated cell whose run-to-run median is `level`."""
    values, repeat = [], []
    for r in range(repeats):
        z = np.empty(queries)
        z[0] = rng.normal()
        noise = rng.normal(0, np.sqrt(1 - phi ** 2), queries)
        for i in range(1, queries):
            z[i] = phi * z[i - 1] + noise[i]
        values.append(level * np.exp(rng.normal(0, tau) + SIGMA * z))
        repeat.append(np.full(queries, r))
    return np.concatenate(values), np.concatenate(repeat)


def verdict(a: tuple, b: tuple, across_repeats: bool) -> str:
    figures = []
    for values, repeat in (a, b):
        low, high, _ = median_confidence_interval(values, repeat, across_repeats)
        figures += [float(np.median(values)), low, high]
    return verdicts(*ratio_interval(*figures)[1:])


def row(rng: np.random.Generator, tau: float, phi: float, draws: int, repeats: int, queries: int) -> dict:
    out = {"tau": tau, "phi": phi}
    for label, across in (("samples", False), ("farm", True)):
        hits, width, false, found = 0, 0.0, 0, 0
        for _ in range(draws):
            a = draw_cell(rng, tau, phi, repeats, queries)
            low, high, _ = median_confidence_interval(*a, across)
            hits += low <= 1.0 <= high
            width += (high - low) / float(np.median(a[0]))
            false += verdict(a, draw_cell(rng, tau, phi, repeats, queries), across) in ("faster", "slower")
            found += verdict(a, draw_cell(rng, tau, phi, repeats, queries, 1.10), across) == "slower"
        out |= {f"{label}_coverage": hits / draws, f"{label}_width": width / draws,
                f"{label}_false": false / draws, f"{label}_power": found / draws}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=300, help="simulated cells per setting")
    parser.add_argument("--repeats", type=int, default=3, help="repeats per simulated cell (the farm's default: 3)")
    parser.add_argument("--quick", action="store_true", help="a few draws of two settings: shows the path works")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(20261122)
    if args.quick:
        settings, draws, queries = [(0.0, 0.0), (0.03, 0.9)], 5, 60
    else:
        settings = [(tau, phi) for tau in (0.0, 0.01, 0.03, 0.1) for phi in (0.0, 0.9, 0.98)]
        draws, queries = args.draws, 300
    print(f"{draws} simulated cells per setting: {args.repeats} repeats x {queries} queries, query sd {SIGMA:.0%}")
    print(f"{'tau':>5} {'phi':>5} | {'coverage':^15} | {'width % of median':^19} | {'false verdicts':^15} "
          f"| {'power at +10 %':^15}")
    print(f"{'':>11} | {'samples':>7} {'farm':>7} | {'samples':>9} {'farm':>9} | {'samples':>7} {'farm':>7} "
          f"| {'samples':>7} {'farm':>7}")
    for tau, phi in settings:
        r = row(rng, tau, phi, draws, args.repeats, queries)
        print(f"{tau:5.2f} {phi:5.2f} | {r['samples_coverage']:7.2f} {r['farm_coverage']:7.2f} | "
              f"{100 * r['samples_width']:9.2f} {100 * r['farm_width']:9.2f} | "
              f"{r['samples_false']:7.2f} {r['farm_false']:7.2f} | {r['samples_power']:7.2f} {r['farm_power']:7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

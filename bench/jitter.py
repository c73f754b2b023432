"""How `jitter` spreads a million schedules that share one cron tick (issue 20): the pushes
per second over the jitter window, printed (never asserted).

Run: .venv/bin/python bench/jitter.py [--schedules N] [--jitter DURATION]

Every schedule `tenant:<i>` fires at the same nominal tick; `jitter_offset_ms` gives each
job's delivery offset. Printed: the jobs delivered in each second of the window (min, mean,
max, standard deviation; the ideal is N / window seconds each), the largest deviation from
the mean, Pearson's chi-square against a uniform spread with its degrees of freedom, and
the cost of computing one offset. No Redis: the offsets are what decides the spread.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import Counter

from kiqbeat.core.durations import duration_s
from kiqbeat.core.lifecycle import jitter_offset_ms

TICK_MS = 1_772_352_000_000  # 2026-03-01T08:00:00Z


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedules", type=int, default=1_000_000)
    parser.add_argument("--jitter", default="5m")
    args = parser.parse_args()
    jitter_ms = round(duration_s(args.jitter) * 1000)
    seconds = max(1, jitter_ms // 1000)
    started = time.perf_counter()
    per_second = Counter(jitter_offset_ms(f"tenant:{i}", TICK_MS, jitter_ms) // 1000
                         for i in range(args.schedules))
    elapsed = time.perf_counter() - started
    counts = [per_second.get(s, 0) for s in range(seconds)]
    mean = args.schedules / seconds
    chi_square = sum((c - mean) ** 2 / mean for c in counts)
    print(f"{args.schedules:,} schedules, one tick, jitter {args.jitter} ({seconds:,} s)")
    print(f"  jobs per second: min {min(counts):,}  mean {mean:,.1f}  max {max(counts):,}  "
          f"stdev {statistics.pstdev(counts):,.1f} (Poisson-ideal {mean ** 0.5:,.1f})")
    print(f"  largest deviation from the mean: "
          f"{max(abs(c - mean) for c in counts) / mean:.2%}")
    print(f"  chi-square {chi_square:,.1f} with {seconds - 1:,} degrees of freedom "
          f"(uniform: about {seconds - 1:,} ± {(2 * (seconds - 1)) ** 0.5:,.0f})")
    print(f"  without jitter: all {args.schedules:,} in the same second")
    print(f"  offset cost: {elapsed / args.schedules * 1e6:.2f} µs each")


if __name__ == "__main__":
    main()

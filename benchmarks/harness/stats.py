"""Figures from several runs: percentiles, the median with its spread, and their formatting."""

from __future__ import annotations

import statistics

# Re-exported: the benchmarks' percentile is the demo report's (nearest rank, None when empty).
from backlog_source.demo.report import percentile

__all__ = ["fmt", "median_and_spread", "percentile", "with_spread"]


def median_and_spread(values: list[float]) -> dict[str, float | None]:
    """The median of several runs and their spread (min, max), never the best alone."""
    if not values:
        return {"median": None, "min": None, "max": None}
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarize(runs: dict[str, dict[str, list[dict]]], figures) -> dict[str, dict[str, dict]]:
    """``runs[case][setting]`` (one dict of figures per run) as the :func:`median_and_spread`
    of each of ``figures``, case by case and setting by setting."""
    return {case: {setting: {f: median_and_spread([r[f] for r in rs]) for f in figures}
                   for setting, rs in by_setting.items()} for case, by_setting in runs.items()}


def fmt(value, spec: str = ".2f") -> str:
    return "n/a" if value is None else format(value, spec)


def with_spread(figure: dict, spec: str = ".2f") -> str:
    """A :func:`median_and_spread` figure as ``median (min-max)``, or the median alone when
    every run gave the same value; ``n/a`` when there was none."""
    if figure["median"] is None:
        return "n/a"
    if figure["min"] == figure["max"]:
        return format(figure["median"], spec)
    return f"{format(figure['median'], spec)} ({format(figure['min'], spec)}-{format(figure['max'], spec)})"

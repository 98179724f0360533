"""Where a run's results go: ``results/<benchmark>/<run name>.{json,md,png}``, with the
machine it ran on, and the batch timeline pictures."""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path
from typing import Any

from benchmarks.harness.progress import timestamp_s
from benchmarks.harness.stats import fmt

RESULTS = Path(__file__).resolve().parents[1] / "results"


def machine() -> dict[str, Any]:
    return {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()}


def results_folder(benchmark: str) -> Path:
    """Where ``benchmark`` (its module name, e.g. ``"query_startup"``) keeps its results:
    one folder per benchmark, one ``<run name>.{json,md,png}`` per recorded run."""
    folder = RESULTS / benchmark
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def write_results(benchmark: str, name: str, summary: dict, markdown: list[str]) -> None:
    """Record a run of ``benchmark`` as ``results/<benchmark>/<name>.json`` and ``.md``,
    and print the Markdown."""
    folder = results_folder(benchmark)
    (folder / f"{name}.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    (folder / f"{name}.md").write_text("\n".join(markdown) + "\n")
    print("\n".join(markdown))


# ------------------------------------------------------------------ pictures

#: The x-axis label of :func:`draw_batch_timeline`.
BATCH_TIMELINE_XLABEL = "seconds since start (bars: batches, width = duration; dashed: backlog drained)"


def batch_timeline(progress: list[dict], since: float) -> list[dict]:
    """A run's ``batch_timeline`` for :func:`draw_batch_timeline`: per batch of ``progress``
    its start (seconds after ``since``, wall clock), its duration, and its records."""
    return [{"start": timestamp_s(p["timestamp"]) - since,
             "seconds": p["durationMs"]["triggerExecution"] / 1000,
             "records": p["numInputRows"]} for p in progress]


def draw_batch_timeline(ax, run: dict, title: str) -> None:
    """A run's batches on the matplotlib axes ``ax``: records per batch over time (a bar's
    width is the batch's duration, log scale), and the backlog drained (dashed). ``run``
    holds ``batch_timeline`` (:func:`batch_timeline`) and ``drain_s``, or ``failed``."""
    batches = run["batch_timeline"]
    ax.bar([b["start"] for b in batches], [b["records"] for b in batches],
           width=[max(0.15, b["seconds"]) for b in batches], align="edge", color="tab:blue")
    ax.set_yscale("log")
    if run.get("failed"):
        ax.set_title(f"{title}: failed", fontsize=8)
    else:
        ax.axvline(run["drain_s"], color="black", linestyle="--", linewidth=1)
        ax.set_title(f"{title}: drained {run['drain_s']:.1f} s, live p99 {fmt(run.get('latency_p99_s'))} s", fontsize=8)
    ax.tick_params(labelsize=7)


def save_batch_timelines(benchmark: str, name: str, columns: dict[str, dict[str, list[dict]]]) -> None:
    """``results/<benchmark>/<name>.png``: :func:`draw_batch_timeline` panels of the first run
    of every configuration: a column per key of ``columns`` (a scenario; ``""`` for none), a
    row per configuration (``columns[scenario][configuration]`` is its runs)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = list(next(iter(columns.values())).keys())
    fig, axes = plt.subplots(len(rows), len(columns), figsize=(7 * len(columns) + 2 * (len(columns) == 1),
                                                               1.9 * len(rows)), sharex="col", squeeze=False)
    for column, (scenario, by_row) in enumerate(columns.items()):
        for row, configuration in enumerate(rows):
            draw_batch_timeline(axes[row, column], by_row[configuration][0],
                                f"{scenario} / {configuration}" if scenario else configuration)
        axes[-1, column].set_xlabel(BATCH_TIMELINE_XLABEL, fontsize=8)
    fig.tight_layout()
    fig.savefig(results_folder(benchmark) / f"{name}.png", dpi=90)
    plt.close(fig)

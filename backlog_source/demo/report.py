"""The demo's summary (numbers) and timeline (picture).

Which process: the user's driver program, after the query stopped. Pure functions of what
the monitor, the handle, the receiver and the Parquet output recorded.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.table import Table

from backlog_source.demo.monitor import BatchRecord
from backlog_source.mode_switch import Mode, Transition

HIGH, LOW = Mode.HIGH_THROUGHPUT, Mode.LOW_LATENCY


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(q * len(ordered))) - 1))]


def mode_at(at: float, initial_mode: str, transitions: Sequence[Transition]) -> str:
    """The mode the job was in at wall time ``at`` (a switch counts once the new interval
    applied: at once in place, once the new run started after a restart)."""
    mode = initial_mode
    for transition in transitions:
        if at >= transition.at + transition.apply_seconds:
            mode = transition.to_mode
    return mode


def summarize(
    batches: Sequence[BatchRecord],
    transitions: Sequence[Transition],
    initial_mode: str,
    started_at: float,
    live_latencies: dict[str, list[float]],
    records_written: int,
    distinct_written: int,
    records_read_range: int,
    records_produced: int | None,
) -> dict[str, Any]:
    """The numbers of the summary table. ``live_latencies`` maps a mode to the end-to-end
    latencies (produce -> batch committed) of the live records its batches wrote.
    ``records_read_range``: offsets between the query's start and its last committed
    positions; ``records_produced``: what the demo itself produced into a topic only it
    writes (None on a real cluster)."""
    drained = next((b for b in batches if not b.processing_backlog), None)
    modes = [mode_at(b.started_at, initial_mode, transitions) for b in batches]
    batch_seconds = {m: [b.seconds for b, bm in zip(batches, modes) if bm == m] for m in (HIGH, LOW)}
    switch = next((t for t in transitions if t.to_mode == LOW), None)
    gap = None
    if switch is not None:
        before = [b for b, m in zip(batches, modes) if m == HIGH and b.ended_at <= switch.at + switch.apply_seconds]
        after = [b for b, m in zip(batches, modes) if m == LOW]
        if before and after:
            gap = min(b.started_at for b in after) - max(b.ended_at for b in before)
    return {
        "drain_seconds": None if drained is None else drained.ended_at - started_at,
        "switch_method": None if switch is None else switch.method,
        "switch_apply_seconds": None if switch is None else switch.apply_seconds,
        "switch_effective_seconds": None if switch is None else switch.effective_seconds,
        "switch_gap_seconds": gap,
        "batches": {HIGH: modes.count(HIGH), LOW: modes.count(LOW)},
        "batch_seconds_p50": {m: percentile(v, 0.5) for m, v in batch_seconds.items()},
        "batch_seconds_p99": {m: percentile(v, 0.99) for m, v in batch_seconds.items()},
        "live_latency_p50": {m: percentile(live_latencies.get(m, []), 0.5) for m in (HIGH, LOW)},
        "live_latency_p99": {m: percentile(live_latencies.get(m, []), 0.99) for m in (HIGH, LOW)},
        "live_records_measured": {m: len(live_latencies.get(m, [])) for m in (HIGH, LOW)},
        "records_written": records_written,
        "distinct_records_written": distinct_written,
        "records_read_range": records_read_range,
        "records_produced": records_produced,
        "exactly_once": records_written == distinct_written == records_read_range
        and records_produced in (None, records_read_range),
    }


def summary_table(summary: dict[str, Any]):
    def secs(value) -> str:
        return "-" if value is None else f"{value:.2f} s"

    table = Table(title="backlog-source demo: summary")
    table.add_column("")
    table.add_column(HIGH, justify="right")
    table.add_column(LOW, justify="right")
    table.add_row("batches", str(summary["batches"][HIGH]), str(summary["batches"][LOW]))
    table.add_row("batch duration p50 / p99",
                  f"{secs(summary['batch_seconds_p50'][HIGH])} / {secs(summary['batch_seconds_p99'][HIGH])}",
                  f"{secs(summary['batch_seconds_p50'][LOW])} / {secs(summary['batch_seconds_p99'][LOW])}")
    table.add_row("live record latency p50 / p99",
                  f"{secs(summary['live_latency_p50'][HIGH])} / {secs(summary['live_latency_p99'][HIGH])}",
                  f"{secs(summary['live_latency_p50'][LOW])} / {secs(summary['live_latency_p99'][LOW])}")
    table.add_row("live records measured", f"{summary['live_records_measured'][HIGH]:,}",
                  f"{summary['live_records_measured'][LOW]:,}")
    table.add_section()
    table.add_row("backlog drained after", secs(summary["drain_seconds"]), "")
    table.add_row(f"switch ({summary['switch_method'] or '-'}): applied after", "", secs(summary["switch_apply_seconds"]))
    table.add_row("switch: decision -> first trigger at the new interval", "", secs(summary["switch_effective_seconds"]))
    table.add_row("switch: last batch -> first batch", "", secs(summary["switch_gap_seconds"]))
    table.add_section()
    verdict = "[green]exactly once[/]" if summary["exactly_once"] else "[red]MISMATCH[/]"
    produced = summary["records_produced"]
    table.add_row("records written / distinct / offsets read / produced",
                  f"{summary['records_written']:,} / {summary['distinct_records_written']:,} / "
                  f"{summary['records_read_range']:,} / {'-' if produced is None else f'{produced:,}'}", verdict)
    return table


def write_timeline(
    path: Path,
    batches: Sequence[BatchRecord],
    transitions: Sequence[Transition],
    initial_mode: str,
    started_at: float,
    spans: Sequence[dict[str, Any]],
    points: Sequence[dict[str, Any]] = (),
) -> None:
    """records/s per batch and mode over time with the switch marked; the lag and backlog
    state as a dashboard shows them, from the exported metrics' data points (``points``:
    ``backlog.source.pending_records`` summed over partitions, and
    ``backlog.source.processing_backlog``), not recomputed; and the trace's spans as a Gantt
    strip per bucket; seconds since the query started on the x axis."""
    # Imported here: the backend must be chosen before pyplot is imported, and only the
    # summary draws anything.
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (rate_ax, lag_ax, gantt_ax) = plt.subplots(
        3, 1, figsize=(11, 8.5), sharex=True, gridspec_kw={"height_ratios": [2, 2, 3]}
    )
    ends = [b.ended_at - started_at for b in batches]
    previous = [0.0] + ends[:-1]
    rates = [b.records / max(1e-3, end - prev) for b, end, prev in zip(batches, ends, previous)]
    rate_ax.step(ends, rates, where="pre", color="tab:blue")
    rate_ax.set_ylabel("records/s")
    _metric_panel(lag_ax, points, started_at)

    horizon = max(ends + [1.0])
    colors = {HIGH: "#fde9b5", LOW: "#cdeccd"}
    edges = [0.0] + [t.at + t.apply_seconds - started_at for t in transitions] + [horizon]
    modes = [initial_mode] + [t.to_mode for t in transitions]
    for ax in (rate_ax, lag_ax):
        for mode, left, right in zip(modes, edges[:-1], edges[1:]):
            ax.axvspan(left, right, color=colors.get(mode, "white"), zorder=0)
        for transition in transitions:
            ax.axvline(transition.at - started_at, color="black", linestyle="--", linewidth=1)
    rate_ax.set_title("records/s per batch; background: mode (yellow high-throughput, green low-latency); "
                      "dashed: switch decided", fontsize=9)

    _gantt(gantt_ax, spans, started_at)
    for transition in transitions:
        gantt_ax.axvline(transition.at - started_at, color="black", linestyle="--", linewidth=1)
    gantt_ax.set_xlabel("seconds since the query started")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def metric_series(points: Sequence[dict[str, Any]], name: str, started_at: float) -> list[tuple[float, float]]:
    """``(seconds since started_at, value)`` per export of metric ``name``, summed over its
    series (e.g. the partitions of ``pending_records``), in time order."""
    totals: dict[int, float] = {}
    for point in points:
        if point["name"] == name:
            totals[point["at_ns"]] = totals.get(point["at_ns"], 0.0) + float(point["value"])
    return [(at_ns / 1e9 - started_at, value) for at_ns, value in sorted(totals.items())]


def _metric_panel(ax, points: Sequence[dict[str, Any]], started_at: float) -> None:
    pending = metric_series(points, "backlog.source.pending_records", started_at)
    backlog = metric_series(points, "backlog.source.processing_backlog", started_at)
    if not pending:
        ax.text(0.5, 0.5, "no metrics received", transform=ax.transAxes, ha="center")
        return
    ax.plot([t for t, _ in pending], [v for _, v in pending], color="tab:red", marker=".", linewidth=1)
    ax.set_ylabel("pending_records")
    state_ax = ax.twinx()
    state_ax.step([t for t, _ in backlog], [v for _, v in backlog], where="post", color="tab:blue", linewidth=1)
    state_ax.set_ylim(-0.1, 1.1)
    state_ax.set_yticks([0, 1], ["caught up", "backlog"], fontsize=8)
    ax.set_title("exported metrics, as a dashboard shows them: backlog.source.pending_records (red, all partitions) "
                 "and backlog.source.processing_backlog (blue)", fontsize=9)


def _gantt(ax, spans: Sequence[dict[str, Any]], started_at: float) -> None:
    def seconds(ns: int) -> float:
        return ns / 1e9 - started_at

    rows: list[tuple[str, list[tuple[float, float, str]]]] = []
    phases = [s for s in spans if s["name"] == "backlog.phase"]
    switches = [s for s in spans if s["name"] == "backlog.mode_switch"]
    buckets = sorted((s for s in spans if s["name"] == "backlog.bucket"),
                     key=lambda s: (s["attributes"].get("messaging.destination.name", ""),
                                    int(s["attributes"].get("messaging.destination.partition.id", 0))))
    reads = {s["parent_span_id"]: s for s in spans if s["name"] == "backlog.read"}
    for switch in switches:
        rows.append(("mode switch", [(seconds(switch["start_ns"]), seconds(switch["end_ns"]), "tab:purple")]))
    for phase in phases:
        rows.append(("backlog.phase", [(seconds(phase["start_ns"]), seconds(phase["end_ns"]), "tab:gray")]))
    for bucket in buckets:
        attributes = bucket["attributes"]
        label = f"{attributes.get('messaging.destination.name')}-{attributes.get('messaging.destination.partition.id')}"
        bars = [(seconds(bucket["start_ns"]), seconds(bucket["end_ns"]), "tab:orange")]
        read = reads.get(bucket["span_id"])
        if read is not None:
            bars.append((seconds(read["start_ns"]), seconds(read["end_ns"]), "tab:brown"))
        rows.append((label, bars))
    if not rows:
        ax.text(0.5, 0.5, "no spans received", transform=ax.transAxes, ha="center")
        return
    for index, (label, bars) in enumerate(rows):
        for left, right, color in bars:
            ax.barh(index, max(right - left, 0.05), left=left, color=color, height=0.6)
    ax.set_yticks(range(len(rows)), [label for label, _ in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_title("trace spans: backlog.phase, backlog.bucket per partition (orange; its backlog.read in brown), "
                 "backlog.mode_switch", fontsize=9)

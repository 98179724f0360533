"""The live terminal view (rich): a drain bar per bucket, mode, lag, records/s, latency.

Which process: the user's driver program, main thread; it only reads snapshots.
"""

from __future__ import annotations

import time

from rich.console import Group
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from backlog_source.demo.monitor import Snapshot
from backlog_source.mode_switch import Mode

#: Records/s and latency are averaged over the batches of this many recent seconds.
WINDOW_S = 10.0


def recent_rate(snapshot: Snapshot, now: float, window: float = WINDOW_S) -> float:
    recent = [b for b in snapshot.batches if b.ended_at >= now - window]
    return sum(b.records for b in recent) / window if recent else 0.0


def render(snapshot: Snapshot, mode: str, status: str, started_at: float, produced_live: int) -> Group:
    now = time.time()
    last = snapshot.batches[-1] if snapshot.batches else None
    mode_style = "bold yellow" if mode == Mode.HIGH_THROUGHPUT else "bold green"
    header = Text.assemble(
        ("mode ", "dim"), (mode, mode_style),
        ("   elapsed ", "dim"), f"{now - started_at:,.0f} s",
        ("   batches ", "dim"), f"{len(snapshot.batches):,}",
        ("   records/s ", "dim"), f"{recent_rate(snapshot, now):,.0f}",
        ("   lag ", "dim"), f"{last.lag:,}" if last else "-",
        ("   last batch ", "dim"), f"{last.seconds:.2f} s" if last else "-",
    )
    buckets = Table(box=None, padding=(0, 1), show_header=True, header_style="dim")
    buckets.add_column("partition", no_wrap=True)
    buckets.add_column("backlog drain", width=32)
    buckets.add_column("position", justify="right")
    buckets.add_column("boundary", justify="right")
    buckets.add_column("")
    for bucket in sorted(snapshot.drains):
        drain = snapshot.drains[bucket]
        buckets.add_row(
            str(bucket), ProgressBar(total=1.0, completed=drain.fraction, width=30, complete_style="yellow", finished_style="green"),
            f"{drain.position:,}", f"{drain.boundary:,}", "[green]done[/]" if drain.finished else "",
        )
    footer = Text.assemble((status, "italic"), ("   live records produced: ", "dim"), f"{produced_live:,}",
                           ("   Ctrl-C stops cleanly", "dim"))
    return Group(Panel(header, title="backlog-source demo", expand=False), buckets, footer)

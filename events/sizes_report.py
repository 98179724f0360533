"""The RecordSizesReport and its wire codec (JSON, versioned): what a catch-up task read.

A reader of a batch planned under a byte or time budget (``KafkaSplit.report_sizes``)
publishes one when its last range is read, before its last Arrow batch is handed over: per
topic, the bytes of keys, values and headers it read and the offsets they spanned (gaps
included, since budgets cut ranges of offsets). The enumerator reads the reports of the batch
that just committed from the control topic and plans the next catch-up batch with them: a
measure of everything the last batch read, where a sample at the batch's start reads a few
MiB (``enumerator/record_sizes.py``, still used when no report is there).

A report is a measurement, not a fact the state depends on: a lost, late or duplicated one
changes an estimate (a retried task's report counts twice, weighting the topic's figure
toward its ranges), never which records a batch reads. Reports need the control topic
(``backlog.enabled``, the default); without it every catch-up batch is planned from a
sample. A task publishes with a producer of its own, flushed before its last batch is
handed over: a few ms on loopback, a connection (and its TLS/SASL handshake) per task on a
remote cluster, at most ``RecordSizesReport.publish_timeout_ms`` (5 s) when the control
topic is gone.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from backlog_source.core.codec import VersionedCodec
from backlog_source.core.errors import MalformedEvent

REPORT_TYPE = "RecordSizesReport"
#: The report's versions (the shape of :mod:`backlog_source.core.codec`): 1 is written and read.
REPORT_CODEC = VersionedCodec("RecordSizesReport", "v", 1, MalformedEvent)
#: Control messages larger than this are not parsed: a report of a task over a few topics is
#: a few hundred bytes; a task over more topics reports the largest ones, at most
#: :data:`MAX_TOPICS` and as many as fit in this many bytes (topic names are up to 249 chars).
MAX_REPORT_BYTES = 16 * 1024
MAX_TOPICS = 100


@dataclass(frozen=True)
class TopicSizes:
    """Bytes of keys, values and headers read from one topic, and the offsets they spanned."""

    bytes: int
    offsets: int

    def __add__(self, other: "TopicSizes") -> "TopicSizes":
        return TopicSizes(self.bytes + other.bytes, self.offsets + other.offsets)


@dataclass(frozen=True)
class RecordSizesReport:
    """Reader -> enumerator: "this task read these bytes over these offsets, per topic"."""

    source_id: str
    topics: Mapping[str, TopicSizes] = field(default_factory=dict)
    #: The longest a publish waits for the broker: every task of a catch-up batch publishes
    #: one and it only refines an estimate, so a control topic that is gone (until the driver
    #: re-creates it) costs a task little.
    publish_timeout_ms: ClassVar[int] = 5_000

    def describe(self) -> str:
        return f"RecordSizesReport of {len(self.topics)} topic(s)"

    def encode(self) -> bytes:
        topics: dict[str, list[int]] = {}
        room = MAX_REPORT_BYTES - 512 - len(json.dumps(self.source_id))  # 512: the envelope, with room to spare
        for topic, sizes in sorted(self.topics.items(), key=lambda kv: (-kv[1].bytes, kv[0]))[:MAX_TOPICS]:
            room -= len(json.dumps({topic: [sizes.bytes, sizes.offsets]}, separators=(",", ":")))
            if room < 0:
                break
            topics[topic] = [sizes.bytes, sizes.offsets]
        body = {"source_id": self.source_id, "topics": topics}
        return json.dumps({"type": REPORT_TYPE, **REPORT_CODEC.stamp(body)}, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, payload: bytes | None) -> "RecordSizesReport | None":
        """The report in a control-topic message value, or None when the message is of
        another type (a BacklogFinishEvent). Raises :class:`MalformedEvent` for a report
        that cannot be read."""
        if payload is None or len(payload) > MAX_REPORT_BYTES or REPORT_TYPE.encode() not in payload:
            return None
        try:
            data = json.loads(payload)
        except (UnicodeDecodeError, json.JSONDecodeError):
            return None
        if not isinstance(data, dict) or data.get("type") != REPORT_TYPE:
            return None
        data = REPORT_CODEC.current_shape(data)
        source_id, topics = data.get("source_id"), data.get("topics")
        if not isinstance(source_id, str) or not isinstance(topics, dict):
            raise MalformedEvent("a RecordSizesReport needs 'source_id' (string) and 'topics' (object)")
        sizes = {}
        for topic, pair in topics.items():
            if (not isinstance(pair, list) or len(pair) != 2
                    or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in pair)):
                raise MalformedEvent(f"topic {topic!r}: sizes must be [bytes, offsets], whole numbers >= 0")
            sizes[topic] = TopicSizes(*pair)
        return cls(source_id, sizes)


def split_size_reports(values: Iterable[bytes | None],
                       source_id: str) -> tuple[list[bytes | None], dict[str, TopicSizes]]:
    """Control-topic ``values`` split into those that are not size reports (for the backlog
    state) and the sizes ``source_id``'s readers reported, summed per topic. Reports of other
    sources and unreadable reports are left out."""
    others: list[bytes | None] = []
    totals: dict[str, TopicSizes] = {}
    for value in values:
        try:
            report = RecordSizesReport.decode(value)
        except MalformedEvent:
            continue
        if report is None:
            others.append(value)
        elif report.source_id == source_id:
            for topic, sizes in report.topics.items():
                totals[topic] = totals.get(topic, TopicSizes(0, 0)) + sizes
    return others, totals

"""The demo's settings: command line > ``BACKLOG_*`` environment > ``.env`` > defaults.

Which process: the user's driver program (``backlog-source demo``).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from backlog_source.core.byte_sizes import size_bytes
from backlog_source.core.durations import duration_ms, duration_seconds


class DemoSettings(BaseSettings):
    """Every option of ``backlog-source demo``; the field descriptions are its ``--help``."""

    model_config = SettingsConfigDict(env_prefix="BACKLOG_", env_file=".env", extra="ignore")

    bootstrap_servers: str | None = Field(
        None, description="Kafka cluster to use (host:port[,host:port]). Unset: start a local broker (see --broker)."
    )
    broker: Literal["kafka", "embedded"] = Field(
        "kafka", description="the local broker the demo starts when no bootstrap servers are given: 'kafka' (Apache "
        "Kafka, installed by 'make jvm'; needs Java) or 'embedded' (Tansu from the 'demo' extra: pip only)",
    )
    topic: str = Field("demo-orders", description="topic to read (created when seeding)")
    seed: bool | None = Field(
        None, description="seed the backlog before reading. Default: yes on a broker the demo starts, no on a cluster "
        "given with --bootstrap-servers."
    )
    backlog_records: int = Field(2_000_000, ge=0, description="records in the seeded backlog")
    partitions: int = Field(8, ge=1, description="partitions of the topic when it is created")
    value_size: int = Field(100, ge=1, description="bytes per seeded record value")
    live_rate: int | None = Field(
        None, ge=0, description="live records per second produced into the topic from the query's start (0: none). "
        "Default: 1000 when seeding, 0 on a real cluster unless given",
    )
    live_seconds: float = Field(
        60.0, ge=0, description="seconds of live traffic in low-latency mode before the demo ends"
    )
    high_throughput_interval: str = Field("0 seconds", description="trigger interval while processing backlog")
    low_latency_interval: str = Field("1 second", description="trigger interval once caught up")
    backlog_max_bytes_per_trigger: str | None = Field(
        None, description="bytes per micro-batch while processing backlog (source option backlog.maxBytesPerTrigger; "
        "unset: the source's default, 256m)",
    )
    target_batch_duration: str | None = Field(
        "10 seconds", description="how long a catch-up batch should take (source option backlog.targetBatchDuration): "
        "batches start at 16 MiB and grow to it, bounded by the byte budget ('' or 'off': none)",
    )
    backlog_max_offsets_per_trigger: int | None = Field(
        None, ge=1, description="records per micro-batch while processing backlog (source option "
        "backlog.maxOffsetsPerTrigger; unset: bounded by bytes and time only)",
    )
    max_offsets_per_trigger: int | None = Field(
        None, ge=1, description="records per micro-batch in both modes (source option maxOffsetsPerTrigger; unset: a "
        "caught-up batch reads what is there)",
    )
    output: Path = Field(Path("demo-output"), description="directory for Parquet, checkpoint, spans and timeline.png")
    drain_timeout_seconds: float = Field(1_800.0, gt=0, description="give up if the backlog is not drained by then")
    live_view: bool = Field(True, description="the live terminal view (off: one line per batch, for logs)")
    kafka_options: dict[str, SecretStr] = Field(
        default_factory=dict,
        description="extra source options, e.g. kafka.security.protocol=SASL_SSL (repeatable; values never printed)",
    )

    @field_validator("high_throughput_interval", "low_latency_interval")
    @classmethod
    def _interval(cls, value: str, info) -> str:
        duration_seconds(info.field_name, value)
        return value

    @field_validator("target_batch_duration")
    @classmethod
    def _target(cls, value: str | None, info) -> str | None:
        if value is None or value.strip().lower() in ("", "off"):
            return None
        duration_ms(info.field_name, value)  # the source's own rule, checked before anything starts
        return value

    @field_validator("backlog_max_bytes_per_trigger")
    @classmethod
    def _bytes(cls, value: str | None, info) -> str | None:
        if value is not None:
            size_bytes(info.field_name, value)
        return value

    @property
    def source_options(self) -> dict[str, str]:
        """The batch-size options the demo hands the source: only those set."""
        chosen = {
            "backlog.maxBytesPerTrigger": self.backlog_max_bytes_per_trigger,
            "backlog.targetBatchDuration": self.target_batch_duration,
            "backlog.maxOffsetsPerTrigger": self.backlog_max_offsets_per_trigger,
            "maxOffsetsPerTrigger": self.max_offsets_per_trigger,
        }
        return {key: str(value) for key, value in chosen.items() if value is not None}

    @property
    def starts_broker(self) -> bool:
        """The demo starts its own local broker (Apache Kafka or Tansu, see ``broker``)."""
        return self.bootstrap_servers is None

    @property
    def needs_seals(self) -> bool:
        """Producers must seal partitions: only on Tansu (``seal_partitions``)."""
        return self.starts_broker and self.broker == "embedded"

    @property
    def seeding(self) -> bool:
        return self.starts_broker if self.seed is None else self.seed

    @property
    def live_records_per_second(self) -> int:
        """Never writes into someone's topic unless asked: 0 on an unseeded real cluster."""
        if self.live_rate is not None:
            return self.live_rate
        return 1_000 if self.seeding else 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One ``--kebab-case`` flag per field, described by the field; unset flags fall back to
    the environment, ``.env`` and the defaults."""
    for name, field in DemoSettings.model_fields.items():
        flag = "--" + name.replace("_", "-")
        default = field.default if field.default_factory is None else "{}"
        help_text = f"{field.description} (env BACKLOG_{name.upper()}; default {default})"
        if name == "kafka_options":
            parser.add_argument("--option", dest=name, action="append", metavar="KEY=VALUE", help=help_text,
                                default=argparse.SUPPRESS)
        elif field.annotation in (bool, bool | None):
            parser.add_argument(flag, dest=name, action=argparse.BooleanOptionalAction, help=help_text,
                                default=argparse.SUPPRESS)
        else:
            parser.add_argument(flag, dest=name, help=help_text, default=argparse.SUPPRESS)


def from_arguments(args: argparse.Namespace) -> DemoSettings:
    """Settings from parsed flags (only those given) over the environment and ``.env``.

    Raises pydantic's ValidationError, which names the option and what is allowed."""
    given = {k: v for k, v in vars(args).items() if k in DemoSettings.model_fields}
    if "kafka_options" in given:
        pairs = {}
        for item in given["kafka_options"]:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise ValueError(f"--option expects KEY=VALUE, got {key!r}")
            pairs[key] = value
        given["kafka_options"] = pairs
    return DemoSettings(**given)

"""How a backlog-aware query changes its trigger: decided once, when it starts.

Which process: the user's driver program. :func:`~backlog_source.mode_switch.start_backlog_aware`
makes a :class:`SwitchPolicy` from what the user asked (``switch_method``) and what the
writer allows (a sink that cannot restart, Spark Connect); the controller asks it for the
switcher when the query has started (:meth:`SwitchPolicy.choose`), and again if the running
query then fails the in-place checks (:meth:`SwitchPolicy.fall_back`). Every "in place or
restart, and may we restart" decision is here; the switchers only carry it out.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from backlog_source.core.errors import ConfigError, ModeSwitchError
from backlog_source.core.text_enum import TextEnum
from backlog_source.mode_switch.listener import Mode
from backlog_source.mode_switch.switchers import (
    EXECUTOR_CLASS,
    INTERVAL_FIELD,
    InPlaceSwitcher,
    RestartSwitcher,
    SwitchMethod,
    TriggerSwitcher,
)
from backlog_source.mode_switch.writer_info import WriterInfo

log = logging.getLogger(__name__)


class AskedMethod(TextEnum):
    """What ``start_backlog_aware(switch_method=...)`` accepts."""

    AUTO = "auto"  # in place where the Spark runtime allows it, else by restart
    IN_PLACE = SwitchMethod.IN_PLACE.value  # in place or not at all
    RESTART = SwitchMethod.RESTART.value  # always by restart


@dataclass(frozen=True)
class SwitchPolicy:
    """What the user asked, and what the writer allows.

    ``restart_refused``: why a restart-method switch would break this writer's sink (the
    memory sink in append or update mode), or None when it may restart.
    """

    asked: AskedMethod = AskedMethod.AUTO
    connect: bool = False
    restart_refused: str | None = None

    @classmethod
    def decide(cls, switch_method: str, writer: WriterInfo) -> "SwitchPolicy":
        """The policy for ``writer``. Raises :class:`ConfigError`, saying what to change, when
        ``switch_method`` is unknown or cannot work for this writer."""
        try:
            asked = AskedMethod(switch_method)
        except ValueError:
            allowed = ", ".join(method.value for method in AskedMethod)
            raise ConfigError(f"switch_method must be one of {allowed}, got {switch_method!r}") from None
        if writer.connect and asked is AskedMethod.IN_PLACE:
            raise ConfigError("switch_method='in-place' is impossible under Spark Connect (the client has no JVM "
                              "objects to change); use 'auto' or 'restart'")
        refused = restart_problem(writer)
        if refused and (writer.connect or asked is AskedMethod.RESTART):
            raise ConfigError(refused)
        return cls(asked, writer.connect, refused)

    @property
    def why_no_restart(self) -> str | None:
        """Why this query must not fall back to restarts, or None when it may."""
        if self.asked is AskedMethod.IN_PLACE:
            return "switch_method='in-place' was asked for (use 'auto' to fall back to restarts)"
        return self.restart_refused

    def choose(self, query: Any, intervals_ms: Mapping[Mode, int],
               restart: Callable[[], RestartSwitcher]) -> tuple[TriggerSwitcher, str]:
        """The switcher for the just-started ``query`` between the modes' ``intervals_ms``,
        and why (logged once). ``restart`` builds the restart switcher. Takes milliseconds:
        an in-place switcher is only prepared here (the controller attaches it to the
        running executor). Raises :class:`ModeSwitchError` when in place is impossible on this
        Spark runtime and a restart is not allowed: the same kind as :meth:`fall_back`
        raises for the same cause found later (it is no option's fault)."""
        if self.asked is AskedMethod.RESTART:
            return restart(), "the restart method was asked for"
        if self.connect:
            return restart(), "a Spark Connect query has no JVM objects in this process to change in place"
        try:
            return InPlaceSwitcher.prepare(query, intervals_ms), (
                f"{EXECUTOR_CLASS}.{INTERVAL_FIELD} is reachable (the running executor is checked when the query's "
                "plan is ready)")
        except ModeSwitchError as exc:
            if self.why_no_restart is not None:
                raise ModeSwitchError(f"in place is impossible on this Spark runtime ({exc}), and {self.why_no_restart}") from None
            return restart(), f"in place is impossible: {exc}"

    def fall_back(self, problem: ModeSwitchError, restart: Callable[[], RestartSwitcher]) -> TriggerSwitcher:
        """The running query failed the in-place checks (``problem``): the restart switcher,
        logged, or :class:`ModeSwitchError` when a restart is not allowed (the handle then
        ends with it; the query keeps running in its first mode)."""
        if self.why_no_restart is not None:
            raise ModeSwitchError(f"the query cannot switch modes: in place is impossible on the running query "
                                  f"({problem}), and {self.why_no_restart}")
        log.warning("mode switches are by restart after all: in place is impossible on the running query: %s", problem)
        return restart()


def restart_problem(writer: WriterInfo) -> str | None:
    """Why a restart-method switch cannot work for this writer, or None. It stops the query
    and starts it again on its checkpoint; the memory sink recovers from a checkpoint only in
    complete mode (Spark refuses otherwise)."""
    if (writer.sink_format or "").lower() == "memory" and (writer.output_mode or "append").lower() != "complete":
        return (
            "the memory sink cannot restart from its checkpoint in append or update mode, and switches "
            f"{'under Spark Connect ' if writer.connect else ''}restart the query: write to a file sink (parquet, "
            "delta...), use foreachBatch, or outputMode('complete')"
        )
    return None

"""Switch a running query's trigger between high-throughput and low-latency with its backlog.

:func:`start_backlog_aware` (in :mod:`.start`) starts the query and returns a
:class:`BacklogAwareQuery` handle (:mod:`.controller`); :class:`BacklogModeListener`
(:mod:`.listener`) is the ``StreamingQueryListener`` that decides; :mod:`.switchers`
changes the interval, in place or by a restart; :mod:`.writer_info` inspects the writer.
"""

from backlog_source.mode_switch.controller import BacklogAwareQuery, Transition
from backlog_source.mode_switch.listener import BacklogModeListener, Mode, backlog_flag
from backlog_source.mode_switch.start import start_backlog_aware
from backlog_source.mode_switch.switchers import IN_PLACE, RESTART

__all__ = ["IN_PLACE", "RESTART", "BacklogAwareQuery", "BacklogModeListener", "Mode", "Transition", "backlog_flag",
           "start_backlog_aware"]

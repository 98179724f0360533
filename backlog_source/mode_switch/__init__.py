"""Switch a running query's trigger between high-throughput and low-latency with its backlog.

:func:`install` (in :mod:`.install`), called once at job bootstrap, makes every backlog query
of the session switch in place, however it was started; :func:`start_backlog_aware` (in
:mod:`.start`) starts the query and returns a
:class:`BacklogAwareQuery` handle (:mod:`.controller`, with the :class:`ModeController`
that starts the query); both switch each query through one :class:`QuerySwitch`
(:mod:`.query_switch`: decide, apply, span, observers); :class:`BacklogModeListener`
(:mod:`.listener`) is the
``StreamingQueryListener`` that reads the backlog flag; :mod:`.session_listener` keeps one
of them registered per SparkSession and routes its messages to the handles attached to it
(never removed: a removal can hang Spark Connect); :mod:`.policy` decides once how
switches are made, :mod:`.switchers` makes them, in place or by a restart;
:mod:`.writer_info` inspects the writer; :mod:`.session_metrics` exports the session's
backlog metrics when the environment asks for them.
"""

from backlog_source.mode_switch.controller import BacklogAwareQuery, StopTimeoutError
from backlog_source.mode_switch.install import SessionModeSwitch, install
from backlog_source.mode_switch.listener import BacklogModeListener, Mode, backlog_flag
from backlog_source.mode_switch.query_switch import Transition
from backlog_source.mode_switch.session_metrics import disable_metrics, enable_metrics
from backlog_source.mode_switch.start import start_backlog_aware
from backlog_source.mode_switch.switchers import SwitchMethod

__all__ = ["BacklogAwareQuery", "BacklogModeListener", "Mode", "SessionModeSwitch", "StopTimeoutError", "SwitchMethod",
           "Transition", "backlog_flag", "disable_metrics", "enable_metrics", "install",
           "start_backlog_aware"]

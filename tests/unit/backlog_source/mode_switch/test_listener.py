"""The listener: the backlog flag read from recorded progress events, as typed messages."""

from __future__ import annotations

from types import SimpleNamespace

from backlog_source.mode_switch import BacklogModeListener, backlog_flag
from backlog_source.mode_switch.listener import QueryTerminated, TriggerIdle
from tests.fakes import RecordingReceiver, progress_event, source

PHASE = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_listener_sends_typed_messages_from_recorded_progress_events():
    controller = RecordingReceiver()
    listener = BacklogModeListener(controller)
    listener.onQueryProgress(progress_event("q", "r1", 0, source(True, traceparent=PHASE), at_ms=1500))
    listener.onQueryProgress(progress_event("q", "r1", 1, source(False), source(True)))
    listener.onQueryProgress(progress_event("q", "r1", 2, source(raw='{"kafka": {"0": 5}}')))  # not ours
    listener.onQueryProgress(progress_event("q", "r1", 3, source(False)))
    listener.onQueryIdle(SimpleNamespace(id="q", runId="r1", timestamp="2027-01-15T08:00:04.000Z"))
    listener.onQueryTerminated(SimpleNamespace(id="q", runId="r1", exception=None))
    first, second, third, idle, done = controller.messages
    assert (first.batch_id, first.processing_backlog, first.traceparent) == (0, True, PHASE)
    assert first.trigger_started_ms % 60_000 == 1500
    assert (second.batch_id, second.processing_backlog, third.batch_id, third.processing_backlog) == (1, True, 3, False)
    assert [end.processing_backlog for end in second.ends] == [False, True] and second.progress.batchId == 1
    assert isinstance(idle, TriggerIdle) and isinstance(done, QueryTerminated) and done.exception is None


def test_backlog_flag_of_a_progress_without_backlog_sources_is_none():
    assert backlog_flag(SimpleNamespace(sources=[])) is None
    assert backlog_flag(SimpleNamespace(sources=[source(raw="not json")])) is None

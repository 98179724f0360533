"""Every fake in tests/fakes.py is checked against what it stands in for: each method it
offers exists on the real class and accepts the real method's parameters (where Python can
read them; confluent-kafka's C methods are checked by name). A fake that drifts from the
API it fakes fails here, not by passing tests that the real part would fail."""

from __future__ import annotations

import inspect

import pytest
from confluent_kafka import Consumer, Producer
from pyspark.sql.connect.streaming.query import StreamingQuery as ConnectStreamingQuery
from pyspark.sql.connect.streaming.query import StreamingQueryListenerBus as ConnectListenerBus
from pyspark.sql.connect.streaming.query import StreamingQueryManager as ConnectStreamingQueryManager
from pyspark.sql.connect.streaming.readwriter import DataStreamWriter as ConnectDataStreamWriter
from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

from backlog_source.enumerator.group_commits import GroupOffsetsClient, KafkaGroupOffsets
from backlog_source.enumerator.kafka_admin import KafkaAdmin, OffsetsAdminClient, OffsetsClient
from backlog_source.enumerator.record_sizes import KafkaRecordSizes, RecordSizes
from backlog_source.events.control_topic import ControlTopic, ControlTopicReader
from backlog_source.mode_switch.controller import BacklogAwareQuery
from backlog_source.mode_switch.policy import SwitchPolicy
from backlog_source.mode_switch.switchers import InPlaceSwitcher
from tests import fakes

#: (fake, the real classes it stands in for, methods only tests call: scripting the fake)
PAIRS = [
    (fakes.FakeOffsetsClient, (OffsetsClient, KafkaAdmin), {"append", "delete", "recreate"}),
    (fakes.FakeControlTopic, (ControlTopic,), set()),
    (fakes.FakeRecordSizes, (RecordSizes, KafkaRecordSizes), set()),
    (fakes.RecordingControlReader, (ControlTopicReader,), set()),
    (fakes.FakeConsumer, (Consumer,), set()),
    (fakes.FakeProducer, (Producer,), set()),
    (fakes.FakeAdmin, (OffsetsAdminClient,), {"report_error", "report_log"}),
    (fakes.FakeGroupOffsets, (GroupOffsetsClient, KafkaGroupOffsets), set()),
    (fakes.FakeQuery, (StreamingQuery,), set()),
    (fakes.FakeWriter, (DataStreamWriter,), set()),
    (fakes.FakeInPlaceSwitcher, (InPlaceSwitcher,), set()),
    (fakes.RefusedAttach, (InPlaceSwitcher,), set()),
    (fakes.HeldSwitcher, (InPlaceSwitcher,), set()),
    (fakes.ChosenPolicy, (SwitchPolicy,), set()),
    (fakes.BackToBackQuery, (StreamingQuery,), set()),
    (fakes.RecordingReceiver, (BacklogAwareQuery,), set()),
    (fakes.FakeConnectListenerBus, (ConnectListenerBus,), {"server_post", "fail_stream", "hold", "release", "abandon"}),
    (fakes.FakeConnectStreams, (ConnectStreamingQueryManager,), set()),
    (fakes.FakeConnectQuery, (StreamingQuery, ConnectStreamingQuery), set()),
    (fakes.FakeConnectWriter, (DataStreamWriter, ConnectDataStreamWriter), {"wait_started"}),
    (fakes.SignallingSwitcher, (InPlaceSwitcher,), set()),
    (fakes.WaitingReceiver, (BacklogAwareQuery,), {"wait_messages"}),
]


def own_methods(cls) -> dict[str, object]:
    """Public methods and properties the fake defines itself (not inherited from object)."""
    found = {}
    for klass in cls.__mro__:
        if klass.__module__ != fakes.__name__:
            continue
        for name, value in vars(klass).items():
            if not name.startswith("_") and (callable(value) or isinstance(value, property)):
                found.setdefault(name, value)
    return found


def parameters(function) -> dict[str, inspect.Parameter] | None:
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # a C method: no signature to read
        return None
    return {name: p for name, p in signature.parameters.items() if name != "self"}


def accepts(fake: dict[str, inspect.Parameter], real: dict[str, inspect.Parameter]) -> list[str]:
    """The real method's parameters the fake would refuse."""
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in fake.values()):
        return []
    return [name for name, p in real.items()
            if p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD) and name not in fake]


@pytest.mark.parametrize("fake, reals, test_only", PAIRS, ids=lambda v: getattr(v, "__name__", ""))
def test_each_fake_offers_only_the_real_api_and_accepts_its_parameters(fake, reals, test_only):
    if not isinstance(reals, tuple):
        return
    for name, method in own_methods(fake).items():
        if name in test_only:
            continue
        for real in reals:
            assert hasattr(real, name), f"{fake.__name__}.{name} has no counterpart on {real.__name__}"
            real_method = getattr(real, name)
            if isinstance(method, property) or isinstance(real_method, property):
                continue
            fake_params, real_params = parameters(method), parameters(real_method)
            if fake_params is None or real_params is None:
                continue
            refused = accepts(fake_params, real_params)
            assert not refused, f"{fake.__name__}.{name} does not accept {refused} of {real.__name__}.{name}"


def test_the_fake_clock_is_a_clock_and_a_sleep():
    clock = fakes.FakeClock(5.0)
    clock.sleep(0.25)
    assert clock() == 5.25 and clock.slept == [0.25]

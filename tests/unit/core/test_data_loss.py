import logging

import pytest

from backlog_source.core.data_loss import report_data_loss
from backlog_source.core.errors import ConfigError, DataLossError


def test_failing_raises_what_was_lost_and_how_to_continue(caplog):
    with caplog.at_level(logging.WARNING), pytest.raises(DataLossError) as raised:
        report_data_loss(True, "records 3..9 of t-0 are gone", instead="skip them")
    assert str(raised.value) == "records 3..9 of t-0 are gone. Set failOnDataLoss=false to skip them"
    assert caplog.records == []


def test_a_remedy_to_try_first_comes_before_failOnDataLoss():
    with pytest.raises(DataLossError) as raised:
        report_data_loss(True, "records 5..9 are gone", instead="start at 10", first_try="take a newer snapshot")
    assert str(raised.value) == "records 5..9 are gone. Take a newer snapshot, or set failOnDataLoss=false to start at 10"


def test_continuing_warns_on_one_logger_and_returns(caplog):
    with caplog.at_level(logging.WARNING):
        report_data_loss(False, "records 3..9 of t-0 are gone", instead="skip them")
    [record] = caplog.records
    assert record.name == "backlog_source.core.data_loss" and record.levelno == logging.WARNING
    assert record.getMessage() == "records 3..9 of t-0 are gone; failOnDataLoss=false, so the query will skip them"


def test_records_that_never_existed_fail_with_the_class_the_caller_names():
    # A batch read's range past the log end: not lost, asked for wrongly.
    with pytest.raises(ConfigError, match="^records 50..59 do not exist. Use -1, or set failOnDataLoss=false"):
        report_data_loss(True, "records 50..59 do not exist", instead="read to 50", first_try="use -1", error=ConfigError)

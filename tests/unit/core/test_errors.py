"""The error tree of core/errors.py: its shape, and every class crossing executor -> driver."""

from __future__ import annotations

import inspect
import pickle

import pytest

from backlog_source.core import errors
from backlog_source.core.errors import BacklogSourceError, MalformedEvent, OffsetFormatError

_CLASSES = [c for _, c in inspect.getmembers(errors, inspect.isclass) if issubclass(c, BacklogSourceError)]


def test_a_control_message_is_not_an_offset():
    assert not issubclass(MalformedEvent, OffsetFormatError)
    assert issubclass(MalformedEvent, BacklogSourceError)


@pytest.mark.parametrize("cls", _CLASSES, ids=lambda c: c.__name__)
def test_every_error_pickles_with_its_message(cls):
    again = pickle.loads(pickle.dumps(cls("the message")))
    assert type(again) is cls and str(again) == "the message"


def test_the_docstring_names_every_class():
    for cls in _CLASSES:
        assert cls.__name__ in errors.__doc__

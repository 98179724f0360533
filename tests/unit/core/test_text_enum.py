"""String enums behave as their value wherever a plain string went before."""

import json

from backlog_source.core.text_enum import TextEnum
from backlog_source.enumerator.state import EventCounts, EventOutcome


class Colour(TextEnum):
    LIGHT_BLUE = "light-blue"


def test_a_member_prints_formats_and_serialises_as_its_value():
    member = Colour.LIGHT_BLUE
    assert str(member) == f"{member}" == "light-blue" and json.dumps({"c": member}) == '{"c": "light-blue"}'
    assert type(str(member)) is str  # a plain str where a library checks the exact type (span attributes)


def test_a_member_equals_and_hashes_as_its_value_so_decoded_keys_and_members_are_one_key():
    assert Colour.LIGHT_BLUE == "light-blue" and hash(Colour.LIGHT_BLUE) == hash("light-blue")
    decoded = EventCounts({"handled": 5})  # keys as JSON gives them back
    assert decoded.add(EventOutcome.HANDLED).counts == {"handled": 6}

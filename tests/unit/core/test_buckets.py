import pytest

from backlog_source.core.buckets import Bucket, from_nested, to_nested
from backlog_source.core.errors import OffsetFormatError


def test_buckets_order_by_topic_then_partition_and_print_as_kafka_does():
    assert sorted([Bucket("b", 0), Bucket("a", 10), Bucket("a", 2)]) == [Bucket("a", 2), Bucket("a", 10), Bucket("b", 0)]
    assert str(Bucket("orders", 3)) == "orders-3"


def test_nested_shape_is_sparks_and_round_trips():
    values = {Bucket("b", 1): 7, Bucket("a", 10): 3, Bucket("a", 2): 5}
    nested = to_nested(values)
    assert nested == {"a": {"2": 5, "10": 3}, "b": {"1": 7}}
    assert list(nested) == ["a", "b"] and list(nested["a"]) == ["2", "10"]  # equal maps, equal JSON
    assert from_nested(nested, "positions") == values


@pytest.mark.parametrize(
    ("nested", "message"),
    [
        ([1, 2], "positions must be an object of topics, got list"),
        ({"a": 5}, "positions: topic 'a' must map partitions to offsets"),
        ({"a": {"x": 5}}, "positions: partition 'x' of 'a' is not a number"),
        ({"a": {"0": "5"}}, "positions: value for a-0 must be an integer, got '5'"),
        ({"a": {"0": True}}, "positions: value for a-0 must be an integer, got True"),
    ],
)
def test_a_wrong_shape_names_the_field_and_the_value(nested, message):
    with pytest.raises(OffsetFormatError) as error:
        from_nested(nested, "positions")
    assert str(error.value) == message

"""Values crossing the wire keep their type (in process): the standard library's data types,
namedtuples, enums and dataclasses are rebuilt as data, big ints cross without the 4,300-digit
limit, and decoding a hash-flooded set stops at the deadline instead of running on."""

from __future__ import annotations

import collections
import dataclasses
import datetime
import decimal
import enum
import fractions
import json
import time

import pytest

from rewardprof.environments.code._values import Decoder, encode
from rewardprof.environments.code._wire import ChannelClosed, WireViolation

Point = collections.namedtuple("Point", "x y")


class Color(enum.Enum):
    RED = 1
    BLUE = 2


@dataclasses.dataclass(frozen=True)
class Pair:
    a: int
    b: list


def cross(value):
    """Encode, through JSON text, decode: as between two processes."""

    def refer(v):
        raise TypeError(f"{type(v).__name__} is no data")

    text = json.dumps(encode(value, refer))
    return Decoder(lambda tag, inner: None).decode(json.loads(text))


@pytest.mark.parametrize(
    "value",
    [
        collections.Counter("abbc"),
        collections.OrderedDict([(2, "b"), (1, "a")]),
        collections.defaultdict(list, {"k": [1]}),
        collections.deque([1, 2, 3], maxlen=5),
        datetime.date(2024, 2, 29),
        datetime.datetime(2024, 1, 1, 12, 30, tzinfo=datetime.UTC),
        datetime.time(23, 59, 1, 5),
        datetime.timedelta(days=-1, seconds=5),
        decimal.Decimal("1.10"),
        fractions.Fraction(22, 7),
        range(1, 10, 3),
        bytearray(b"ab"),
        10**5000,
        -(2**20000),
        {1: {"set": frozenset({(1, 2)})}},
    ],
    ids=lambda v: type(v).__name__,
)
def test_library_types_arrive_as_themselves(value):
    back = cross(value)
    assert type(back) is type(value) and back == value
    if isinstance(value, collections.deque):
        assert back.maxlen == 5
    if isinstance(value, collections.defaultdict):
        assert back["missing"] == [] and back.default_factory is list


def test_a_counter_keeps_its_zero_for_a_missing_key():
    assert cross(collections.Counter("ab"))["z"] == 0


def test_views_arrive_as_views():
    d = {"a": 1, "b": 2}
    keys, values, items = cross([d.keys(), d.values(), d.items()])
    assert (type(keys), type(values), type(items)) == (
        type(d.keys()),
        type(d.values()),
        type(d.items()),
    )
    assert keys == d.keys() and list(values) == [1, 2] and items == d.items()


def test_namedtuples_enums_and_dataclasses_are_rebuilt_as_data():
    point, color, pair = cross([Point(1, 2), Color.BLUE, Pair(1, [2])])
    assert (point.x, point.y) == (1, 2) and point == (1, 2) and type(point).__name__ == "Point"
    assert color.name == "BLUE" and color.value == 2 and type(color).__name__ == "Color"
    assert (pair.a, pair.b) == (1, [2]) and type(pair).__name__ == "Pair"
    # one rebuilt class per shape: two crossings compare equal
    assert cross(Color.BLUE) == color and cross(Pair(1, [2])) == pair
    assert cross(Color.RED) != color


class Size(enum.IntEnum):
    S = 1
    M = 2


class Tone(enum.StrEnum):
    LOW = "low"


class Perm(enum.Flag):
    R = 4
    W = 2


def test_rebuilt_enums_keep_their_base():
    size, tone, perm = cross([Size.M, Tone.LOW, Perm.R | Perm.W])
    assert size == 2 and isinstance(size, int) and size.name == "M"
    assert tone == "low" and isinstance(tone, str)
    assert perm.value == 6 and isinstance(perm, enum.Flag) and type(perm).__name__ == "Perm"


def test_an_enum_of_the_standard_library_is_itself():
    import http

    assert cross(http.HTTPStatus.OK) is http.HTTPStatus.OK


@pytest.mark.parametrize(
    "wire",
    [
        {"namedtuple": ["P", ["x", "not a name"], [1, 2]]},
        {"enum": ["m", "E", [["A", 1]], 2, "enum"]},
        {"date": "not a date"},
        {"int": "xyz"},
        {"fraction": [1, 0]},
        {"keys": [[1]]},
        {"fraction": [{"int": "f" * 20_000}, 3]},  # reducing it: quadratic in its size
        {"enum": ["m", "E", [[f"M{i}", i] for i in range(5000)], 1, "enum"]},
        {"namedtuple": ["P", [f"f{i}" for i in range(1000)], list(range(1000))]},
    ],
)
def test_a_shape_that_cannot_be_rebuilt_is_a_violation(wire):
    with pytest.raises(WireViolation):
        Decoder(lambda tag, inner: None).decode(wire)


def test_decoding_a_hash_flood_stops_at_the_deadline():
    """Ints that all hash alike (multiples of 2**61 - 1) make each insertion scan every
    earlier one: 200,000 of them would take minutes; decoding gives up at the deadline."""
    colliding = [k * (2**61 - 1) for k in range(200_000)]
    wire = json.loads(json.dumps({"set": colliding}))
    start = time.monotonic()
    with pytest.raises(ChannelClosed) as closed:
        Decoder(lambda tag, inner: None, deadline=start + 0.5).decode(wire)
    assert closed.value.what == "timeout"

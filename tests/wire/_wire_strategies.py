"""Hypothesis settings and strategies shared by the wire fuzz tests."""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

#: Quick, deterministic-enough runs (no example database written into the work tree).
FAST = settings(
    max_examples=120,
    deadline=None,
    database=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)

NUMERIC = [
    "|b1",
    "|i1",
    "|u1",
    "<i2",
    ">i2",
    "<u2",
    ">u2",
    "<i4",
    ">i4",
    "<u4",
    "<i8",
    ">i8",
    "<u8",
    "<f2",
    ">f2",
    "<f4",
    ">f4",
    "<f8",
    ">f8",
    "<c8",
    ">c8",
    "<c16",
]

#: The fields of a row segment (see ostinato.wire.codec).
SEG_KEYS = list("kesndhcb")

#: Anything msgpack can carry (what a hostile peer can put in a message).
mp_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.text(max_size=8)
    | st.binary(max_size=24),
    lambda ch: (
        st.lists(ch, max_size=4)
        | st.dictionaries(st.text(max_size=3) | st.integers(-3, 3), ch, max_size=4)
    ),
    max_leaves=16,
)

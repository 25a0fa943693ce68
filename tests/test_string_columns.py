"""String columns (TensorFlow's ``tf.string``) embedded, over gRPC and through checkpoints.

Every string form a user appends -- ``bytes``/``str``, fixed-width ``S``/``U`` arrays, object
arrays of bytes or str -- is stored as an object array of ``bytes`` (str encoded as UTF-8), as
Reverb returns ``tf.string`` data, so values of different lengths share one column. Columns no
server can hold are refused when they are appended, in the caller's thread, naming the column.
"""

from __future__ import annotations

import numpy as np
import pytest

import ostinato as reverb
from ostinato import checkpointers

TABLES = """
import ostinato as reverb
TABLES = [reverb.Table(name="t", sampler=reverb.selectors.Fifo(),
                       remover=reverb.selectors.Fifo(), max_size=100,
                       rate_limiter=reverb.rate_limiters.MinSize(1)),
          reverb.Table.queue("q", 1)]
"""


def _flat(x):
    return [np.asarray(v) for v in (x if isinstance(x, (list, tuple)) else [x])]


def test_insert_issue_example_round_trips(serve):
    client = serve(TABLES)
    client.insert([np.array([b"ab", b"cde"]), 7, 2.5, True], priorities={"t": 1.0})
    [s] = next(client.sample("t", num_samples=1))
    data = s.data
    assert data[0].dtype == object and data[0].tolist() == [b"ab", b"cde"]
    np.testing.assert_array_equal(data[0], np.array([b"ab", b"cde"]))
    assert data[1] == 7 and data[2] == 2.5 and bool(data[3]) is True


@pytest.mark.parametrize(
    "value, want",
    [
        (np.array([b"ab", b"cde"]), [b"ab", b"cde"]),  # S3
        (np.array(["ab", "d\u00e9f"]), [b"ab", "d\u00e9f".encode()]),  # U3
        (np.array([b"x", "y"], dtype=object), [b"x", b"y"]),  # object, mixed
        (np.array([b"", b"zz"], dtype=object), [b"", b"zz"]),  # empty string
        (np.array([[b"a", b"bb"], [b"ccc", b"d"]]), [[b"a", b"bb"], [b"ccc", b"d"]]),  # 2-d
    ],
)
def test_string_kinds_round_trip_in_a_trajectory(serve, value, want):
    client = serve(TABLES)
    with client.trajectory_writer(num_keep_alive_refs=2) as w:
        w.append({"s": value, "x": np.float32(1)})
        w.append({"s": value, "x": np.float32(2)})
        w.create_item("t", 1.0, {"s": w.history["s"][:], "x": w.history["x"][-1]})
        w.flush()
    b = client.sample_batch("t", 1, timeout=10)
    s = b.data[0]
    assert s.dtype == object and s.shape == (1, 2, *np.shape(value))
    assert s[0, 0].tolist() == want and s[0, 1].tolist() == want


def test_strings_of_different_lengths_share_a_column(serve):
    client = serve(TABLES)
    ids = [b"ep-9", b"ep-10", b"episode-11", "\u00fcber", b"bin\x00ary\x00\x00"]
    with client.trajectory_writer(num_keep_alive_refs=len(ids)) as w:
        for i in ids:
            w.append({"id": np.array(i), "py": i})
        w.create_item("t", 1.0, {"id": w.history["id"][:], "py": w.history["py"][:]})
        w.flush()
    b = client.sample_batch("t", 1, timeout=10)
    want = [i.encode() if isinstance(i, str) else i for i in ids]
    # np.array(bytes) is fixed width and numpy drops trailing NULs of S values; a Python bytes
    # value is stored as it is.
    assert b.data[0][0].tolist() == [w.rstrip(b"\x00") for w in want]
    assert b.data[1][0].tolist() == want


def test_unsupported_dtypes_are_refused_at_append_naming_the_column(serve):
    client = serve(TABLES)
    with client.trajectory_writer(num_keep_alive_refs=1) as w:
        with pytest.raises(ValueError, match=r"column when.*datetime64"):
            w.append({"when": np.array(["2026-01-01"], dtype="datetime64[D]")})
    with client.trajectory_writer(num_keep_alive_refs=1) as w:
        with pytest.raises(ValueError, match=r"column obj.*only bytes or str.*int"):
            w.append({"obj": np.array([1, "a"], dtype=object)})
    with client.trajectory_writer(num_keep_alive_refs=1) as w:
        with pytest.raises(ValueError, match=r"column rec.*not supported"):
            w.append({"rec": np.zeros(2, dtype=[("a", "i4"), ("b", "f4")])})
    with pytest.raises(ValueError, match=r"column 1.*only bytes or str.*NoneType"):
        client.insert([np.zeros(1), np.array([None], dtype=object)], priorities={"t": 1.0})
    # Nothing half-written: the table is empty and keeps working.
    client.insert([np.array(b"ok")], priorities={"t": 1.0})
    [s] = next(client.sample("t", num_samples=1))
    assert s.data[0].item() == b"ok"


def test_string_signature_accepts_every_string_form(serve_signature_tables):
    client = serve_signature_tables
    with client.trajectory_writer(num_keep_alive_refs=1) as w:
        for v in (b"a", "b", np.array(b"cc"), np.array("dd"), np.array(b"e", dtype=object)):
            w.append({"s": v})
            w.create_item("sig", 1.0, {"s": w.history["s"][-1]})
        w.flush()
    got = [client.sample_batch("sig", 1, timeout=10).data["s"][0] for _ in range(5)]
    assert got == [b"a", b"b", b"cc", b"dd", b"e"]


@pytest.fixture()
def serve_signature_tables(serve):
    return serve("""
import numpy as np
import ostinato as reverb
TABLES = [reverb.Table.queue("sig", 10, signature={"s": reverb.TensorSpec([], np.bytes_)})]
""")


def test_string_spec_dtypes_are_tf_string():
    for d in (str, bytes, np.bytes_, np.str_, "S", "U5", object):
        assert reverb.TensorSpec([], d).dtype == np.dtype(object)


def test_string_columns_survive_a_checkpoint(tmp_path, make_server):
    def table():
        return reverb.Table(
            name="t",
            sampler=reverb.selectors.Fifo(),
            remover=reverb.selectors.Fifo(),
            max_size=100,
            rate_limiter=reverb.rate_limiters.MinSize(1),
        )

    values = [b"ab", "c\u00e9", b"", b"trailing\x00\x00", b"\x00lead", b"\x00"]
    s1 = make_server(table(), checkpointer=checkpointers.DefaultCheckpointer(str(tmp_path)))
    for how in ("embedded", "grpc"):
        client = reverb.Client(
            f"localhost:{s1.port}", in_process=(how == "embedded"), unavailable_timeout=10
        )
        with client.trajectory_writer(num_keep_alive_refs=len(values)) as w:
            for v in values:
                w.append({"s": v, "fixed": np.array([b"xy", b"z"])})
            w.create_item("t", 1.0, {"s": w.history["s"][:], "fixed": w.history["fixed"][:]})
            w.flush()
        client.close()
    s1.localhost_client().checkpoint()
    s2 = make_server(table(), checkpointer=checkpointers.DefaultCheckpointer(str(tmp_path)))
    b = s2.localhost_client().sample_batch("t", 2, timeout=10)
    want = [v.encode() if isinstance(v, str) else v for v in values]
    assert [row.tolist() for row in b.data[1]] == [want, want]
    assert [row.tolist() for row in b.data[0]] == [[[b"xy", b"z"]] * len(values)] * 2

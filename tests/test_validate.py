"""ostinato.validate: the shared argument checks name the argument and quote the value."""

import numpy as np
import pytest

from ostinato import validate


def test_positive_and_non_negative_ints():
    assert (
        validate.positive_int("n", np.int64(3)) == 3 and type(validate.positive_int("n", 3)) is int
    )
    assert validate.positive_int("n", None, none_ok=True) is None
    assert validate.non_negative_int("n", 0) == 0
    for bad in (0, -1, 1.5, True, "2", None):
        with pytest.raises(ValueError, match=rf"^n \({bad!r}\) must be a positive integer$"):
            validate.positive_int("n", bad)
    with pytest.raises(ValueError, match=r"^n \(0\) must be None or a positive integer$"):
        validate.positive_int("n", 0, none_ok=True)
    with pytest.raises(ValueError, match=r"^n \(-1\) must be a non-negative integer$"):
        validate.non_negative_int("n", -1)


def test_ports():
    assert validate.port("port", 0) == 0 and validate.port("port", 65535) == 65535
    assert validate.port("port", None, none_ok=True) is None
    for bad in (-1, 65536, False, 80.0):
        with pytest.raises(
            ValueError, match=rf"^port \({bad!r}\) must be an integer in 0\.\.65535$"
        ):
            validate.port("port", bad)
    with pytest.raises(ValueError, match=r"in 1\.\.65535"):
        validate.port("port", 0, zero_ok=False)


def test_numbers():
    assert validate.is_int(np.int8(1)) and not validate.is_int(True) and not validate.is_int(1.0)
    assert validate.is_real(1.5) and validate.is_real(np.float32(1)) and not validate.is_real(True)
    assert validate.non_negative_number("x", 2) == 2.0
    with pytest.raises(ValueError, match=r"^x \(nan\) must be a finite number >= 0$"):
        validate.non_negative_number("x", float("nan"))


def test_positive_number():
    assert validate.positive_number("x", np.float32(0.5)) == 0.5
    assert validate.positive_number("x", None, none_ok=True) is None
    for bad in (0, -1.0, float("nan"), float("inf"), True, "1"):
        with pytest.raises(ValueError, match=r"^x \(.*\) must be a finite number > 0$"):
            validate.positive_number("x", bad)
    with pytest.raises(ValueError, match=r"must be None or a finite number > 0$"):
        validate.positive_number("x", 0, none_ok=True)

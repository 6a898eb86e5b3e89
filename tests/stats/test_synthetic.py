"""packtool.stats.synthetic: --synthetic specs and --lengths files (parsing, validation, determinism)."""

from __future__ import annotations

import numpy as np
import pytest

from packtool.errors import PacktoolError, UsageError
from packtool.stats.synthetic import EXAMPLE, parse_spec, read_lengths, synthetic_lengths


def test_parse_fills_defaults():
    (c,) = parse_spec("lognormal")
    assert c.dist == "lognormal"
    assert dict(c.params) == {
        "median": 450,
        "sigma": 0.9,
        "n": 10_000,
        "min": 1,
        "max": None,
        "seed": 0,
    }


def test_parse_example_and_suffixes():
    (c,) = parse_spec(EXAMPLE)
    assert (c.get("median"), c.get("sigma"), c.get("n"), c.get("max"), c.get("seed")) == (
        450,
        0.9,
        20000,
        4096,
        0,
    )
    assert parse_spec("constant:value=2k,n=1M")[0].get("n") == 1_000_000
    assert parse_spec("constant:value=2k")[0].get("value") == 2000
    assert parse_spec("uniform:min=1,max=1_000,n=2e+3")[0].get("n") == 2000
    assert parse_spec(" Lognormal : median = 300 , n = 5 ")[0].get("median") == 300


def test_mixture():
    parts = parse_spec("lognormal:median=300,n=90+constant:value=8192,n=10")
    assert [p.dist for p in parts] == ["lognormal", "constant"]
    x = synthetic_lengths("lognormal:median=300,n=90+constant:value=8192,n=10")
    assert x.size == 100 and (x == 8192).sum() >= 10


def test_generation_deterministic_and_bounded():
    a = synthetic_lengths(EXAMPLE)
    b = synthetic_lengths(EXAMPLE)
    assert a.dtype == np.int32 and a.size == 20000
    assert np.array_equal(a, b)
    assert a.min() >= 1 and a.max() <= 4096
    assert abs(np.median(a) - 450) < 15
    assert not np.array_equal(a, synthetic_lengths(EXAMPLE.replace("seed=0", "seed=1")))
    u = synthetic_lengths("uniform:min=10,max=20,n=5000")
    assert u.min() == 10 and u.max() == 20
    n = synthetic_lengths("normal:mean=100,std=1000,n=5000,min=5,max=300")
    assert n.min() == 5 and n.max() == 300
    assert (synthetic_lengths("constant:value=7,n=3") == 7).all()


@pytest.mark.parametrize(
    "spec, match",
    [
        ("", "empty spec"),
        ("lognormall:n=5", r"unknown distribution 'lognormall' \(known: lognormal"),
        ("lognormal:mediam=3", r"lognormal has no parameter 'mediam' \(it takes median, sigma"),
        ("lognormal:median=abc", "median='abc' is not a number"),
        ("lognormal:n", "'n' is not KEY=VALUE"),
        ("lognormal:n=0", "n=0 must be in 1"),
        ("lognormal:n=1.5", "n='1.5' must be a whole number"),
        ("lognormal:median=-3", "median=-3.0 must be > 0"),
        ("lognormal:sigma=-1", "sigma=-1.0 must be >= 0"),
        ("uniform:min=5,max=2", "max=2 is below min=5"),
        ("uniform:min=0,max=2", "min=0 must be >= 1"),
        ("constant:value=0", "value=0 must be >= 1"),
        ("normal:std=-2", "std=-2.0 must be >= 0"),
        ("lognormal:n=5,n=6", "n is given twice"),
        ("lognormal:n=1e12", "must be in 1..500,000,000"),
        ("lognormal:median=300+bogus:n=3", "unknown distribution 'bogus'"),
    ],
)
def test_bad_specs(spec, match):
    with pytest.raises(UsageError, match=match) as err:
        parse_spec(spec)
    msg = str(err.value)
    assert "\n" not in msg and "e.g. --synthetic " in msg  # one line, with a valid example
    example = msg.split("e.g. --synthetic ")[1]
    parse_spec(example)  # the example shown is itself valid


def test_read_lengths_txt_and_npy(tmp_path):
    txt = tmp_path / "l.txt"
    txt.write_text("5\n 12\n\n4096\n")
    assert read_lengths(str(txt)).tolist() == [5, 12, 4096]
    npy = tmp_path / "l.npy"
    np.save(npy, np.array([3, 1, 2], dtype=np.int64))
    out = read_lengths(str(npy))
    assert out.dtype == np.int32 and out.tolist() == [3, 1, 2]


def test_read_lengths_errors(tmp_path):
    with pytest.raises(UsageError, match="no such file"):
        read_lengths(str(tmp_path / "missing.txt"))
    bad = tmp_path / "bad.txt"
    bad.write_text("5\n12\nabc\n")
    with pytest.raises(PacktoolError, match=r"bad.txt:3: 'abc' is not an integer"):
        read_lengths(str(bad))
    zero = tmp_path / "zero.txt"
    zero.write_text("5\n0\n")
    with pytest.raises(PacktoolError, match=r"length #2 is 0; lengths must be >= 1"):
        read_lengths(str(zero))
    empty = tmp_path / "empty.txt"
    empty.write_text("\n")
    with pytest.raises(PacktoolError, match="no lengths"):
        read_lengths(str(empty))
    two_d = tmp_path / "2d.npy"
    np.save(two_d, np.ones((2, 2), dtype=np.int32))
    with pytest.raises(PacktoolError, match="1-D integer array"):
        read_lengths(str(two_d))
    floats = tmp_path / "f.npy"
    np.save(floats, np.ones(3))
    with pytest.raises(PacktoolError, match="1-D integer array"):
        read_lengths(str(floats))


@pytest.mark.parametrize(
    "spec, match",
    [
        ("lognormal:n=1e400", r"n='1e400' is not a finite number"),
        ("lognormal:median=1e400", r"median='1e400' is not a finite number"),
        (
            "uniform:max=1e30",
            r"max=1e\+30 is above the longest length, 2,147,483,647",
        ),
        ("uniform:min=1,max=1e10,n=5", r"max=1e\+10 is above the longest length"),
        ("constant:value=3e9,max=5e9", r"value=3e\+09 is above the longest length"),
        ("normal:min=3G", r"min=3e\+09 is above the longest length"),
    ],
)
def test_numbers_out_of_range_are_refused_by_key_and_limit(spec, match):
    """Non-finite numbers and lengths past int32 were tracebacks or wrapped to negative lengths."""
    with pytest.raises(UsageError, match=match):
        synthetic_lengths(spec)


def test_the_longest_int32_length_is_drawn_as_given():
    x = synthetic_lengths(
        "uniform:min=2147483640,max=2147483647,n=50+constant:value=2147483647,n=2"
    )
    assert x.min() >= 2147483640 and x.max() == 2**31 - 1 and (x > 0).all()

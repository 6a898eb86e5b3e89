"""The small JSON cache files (resolved tokenizer specs, template verdicts): a checksum line, then
the JSON body; damaged files are removed with one warning, an older layout silently."""

from __future__ import annotations

import warnings

import pytest

from packtool.tokenization import cache


def test_round_trip_keeps_the_object(tmp_path):
    obj = {"name": "t", "backend_json": '{"a": "\\u00e9\\n"}' * 1000, "ids": [1, None, 3]}
    path = tmp_path / "tokenizers" / "x.json"
    cache.write_json(path, obj)
    assert cache.read_json(path) == obj
    assert path.read_bytes().startswith(b"packtool-json 1 ")


def test_absent_file_is_none(tmp_path):
    assert cache.read_json(tmp_path / "nope.json") is None


@pytest.mark.parametrize(
    "damage",
    [
        lambda raw: raw[:-3],  # truncated body
        lambda raw: raw.replace(b'"t"', b'"u"'),  # a changed byte in the body
        lambda raw: raw[:20] + (b"1" if raw[20:21] == b"0" else b"0") + raw[21:],  # checksum
        lambda raw: raw.split(b"\n")[0],  # no body
    ],
)
def test_damaged_file_is_removed_with_one_warning(tmp_path, damage):
    path = tmp_path / "x.json"
    cache.write_json(path, {"name": "t", "n": 12345})
    path.write_bytes(damage(path.read_bytes()))
    with pytest.warns(cache.CacheWarning, match=r"x\.json is damaged"):
        assert cache.read_json(path) is None
    assert not path.exists()


def test_older_layout_is_recomputed_without_a_warning(tmp_path):
    path = tmp_path / "x.json"
    path.write_text('{"data": {"name": "t"}, "checksum": "abc"}')
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cache.read_json(path) is None
    assert not path.exists()


def test_bytes_round_trip_as_they_are(tmp_path):
    body = '{"model": {"vocab": {"\\"é": 1}}}\n'.encode() * 1000
    path = tmp_path / "x.tokenizer.json"
    cache.write_bytes(path, body)
    assert cache.read_bytes(path) == body
    path.write_bytes(path.read_bytes()[:-1])
    with pytest.warns(cache.CacheWarning, match=r"x\.tokenizer\.json is damaged"):
        assert cache.read_bytes(path) is None

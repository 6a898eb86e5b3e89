"""How --engine ray is refused, without starting Ray: not installed, a mixture, --ray-address alone."""

from __future__ import annotations

import importlib.util

from ray_packs import cli

from packtool.demo_data import write_sample


def test_without_ray_the_engine_is_a_usage_error_with_the_install_hint(tmp_path, monkeypatch):
    write_sample(tmp_path / "s.jsonl", n=5)
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name.startswith("ray") else real(name, *a),
    )
    r = cli(
        "pack", tmp_path / "s.jsonl", "--len", "512", "--out", tmp_path / "o", "--engine", "ray"
    )
    assert r.exit_code == 2
    assert "pip install 'ray>=2.40,<3'" in r.output and "Traceback" not in r.output
    assert "pip install -e '.[ray]'" in r.output
    assert not (tmp_path / "o").exists()


def test_ray_address_needs_the_ray_engine(tmp_path):
    write_sample(tmp_path / "s.jsonl", n=5)
    r = cli("profile", tmp_path / "s.jsonl", "--ray-address", "auto")
    assert r.exit_code == 2 and "--ray-address" in r.output and "--engine ray" in r.output


def test_an_unknown_engine(tmp_path):
    write_sample(tmp_path / "s.jsonl", n=5)
    r = cli("profile", tmp_path / "s.jsonl", "--engine", "spark")
    assert r.exit_code == 2 and "local|ray" in r.output

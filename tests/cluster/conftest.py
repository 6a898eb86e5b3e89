"""One local Ray cluster of 2 CPUs for every test here (packtool's Session joins it and leaves it
running); the tests skip cleanly where Ray is not installed."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def ray_cluster():
    ray = pytest.importorskip("ray")
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()

"""verify: integrity of every row, and isolation through a real attention kernel."""

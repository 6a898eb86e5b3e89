"""verify --model over every causal-LM config transformers ships (slow): a pass only where every
layer kind the config declares was built and kept documents apart; else a failure naming the
leaking layer, or "not checked" with its reason, each within the per-architecture bound.

    python tests/verify/test_model_sweep.py [--limit 60] [model_type ...]   the table, as markdown
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from packs import model_samples  # noqa: E402

LIMIT_S = 60  # per architecture in the sweep (verify's own bound is model_check.LIMIT_S)


def model_types() -> list[str]:
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return [mt for mt in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES if mt in CONFIG_MAPPING_NAMES]


def check_one(mt: str, folder: Path, limit_s: float = LIMIT_S) -> dict:
    """{model_type, result: pass | fail | not checked | no config, why, seconds} for one
    architecture, its default config saved to `folder`; asserts the sweep's rule on the way."""
    from transformers import AutoConfig

    from packtool.verify import model_check

    try:
        AutoConfig.for_model(mt).save_pretrained(folder)
    except Exception as e:  # no default config: nothing a user could pass
        return {"model_type": mt, "result": "no config", "why": type(e).__name__, "seconds": 0}
    path = folder / "config.json"
    t0 = time.perf_counter()
    checks, report = model_check.bounded(
        json.loads(path.read_text()), str(path), mt, model_samples(), "cpu", 0, limit_s=limit_s
    )
    seconds = time.perf_counter() - t0
    iso = checks[0]
    assert "\n" not in iso.message
    result = "not checked" if iso.unchecked else "pass" if iso.passed else "fail"
    if iso.passed:  # the rule: a pass only with every declared kind built and no layer leaking
        assert report["not_built"] == [] and not report["leaking_layers"], (mt, report)
        assert report["status"] == "passed"
    elif result == "fail" and report.get("leaking_layers"):
        assert "layer " in iso.message  # the probe names the layer that leaked
    return {"model_type": mt, "result": result, "why": iso.message, "seconds": seconds}


@pytest.mark.slow
def test_every_causal_lm_config(tmp_path):
    rows = [check_one(mt, tmp_path / mt) for mt in model_types()]
    assert all(r["seconds"] < LIMIT_S + 15 for r in rows), [r for r in rows if r["seconds"] > 60]


def main(argv: list[str]) -> None:
    import tempfile

    limit = LIMIT_S
    if argv[:1] == ["--limit"]:
        limit, argv = float(argv[1]), argv[2:]
    names = argv or model_types()
    print("| model_type | result | seconds | why |\n|---|---|---|---|", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for mt in names:
            r = check_one(mt, Path(tmp) / mt, limit)
            why = r["why"].replace("|", "/")[:400]
            print(f"| {mt} | {r['result']} | {r['seconds']:.1f} | {why} |", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])

"""`verify --sources` on a preference pack: the pairs derived again from the records match every
side of every row (truncated pairs too); a prompt token changed on both sides, which the pair rules
cannot see, fails the sources comparison."""

from __future__ import annotations

import hashlib
import json

import pyarrow as pa
import pyarrow.parquet as pq
from ray_packs import cli

Q = {"role": "user", "content": "Tell me about the sea."}


def _pairs(n: int) -> list[dict]:
    return [
        {
            "prompt": [{**Q, "content": f"{Q['content']} ({i})"}],
            "chosen": [{"role": "assistant", "content": "Waves, salt and tides. " * (1 + i % 7)}],
            "rejected": [{"role": "assistant", "content": "No." * (1 + i % 3)}],
        }
        for i in range(n)
    ]


def _resign(out):
    m = json.loads((out / "manifest.json").read_text())
    for s in m["shards"]:
        path = out / s["file"]
        s["sha256"], s["bytes"] = hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_size
    (out / "manifest.json").write_text(json.dumps(m))


def test_sources_rederive_pairs_and_catch_a_prompt_token_changed_on_both_sides(tmp_path):
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in _pairs(30)))
    out = tmp_path / "p"
    r = cli("pack", data, "--len", "72", "--overflow", "truncate", "--out", out, "--no-cache")
    assert r.exit_code == 0, r.output
    m = json.loads((out / "manifest.json").read_text())
    assert m["counts"]["truncated"] > 0  # some pairs were cut to fit: their sides still match
    v = cli("verify", out, "--sources", "--rows", "0")
    assert v.exit_code == 0, v.output

    shard = next((out / "data").glob("*.parquet"))
    rows = pq.read_table(shard).to_pylist()
    row = rows[0]
    row["input_ids"][2] = row["input_ids"][row["seq_lengths"][0] + 2] = 7  # both sides' prompt
    table = pa.Table.from_pylist(rows, schema=pq.read_schema(shard))
    pq.write_table(table, shard)
    _resign(out)
    v = cli("verify", out, "--rows", "0")
    assert v.exit_code == 0, v.output  # the pair rules hold: the same prompt on both sides
    v = cli("verify", out, "--sources", "--rows", "0")
    assert v.exit_code == 1 and "sources tokens" in v.output
    assert "(chosen)" in " ".join(v.output.split())

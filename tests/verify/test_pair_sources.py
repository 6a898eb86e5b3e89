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


def _checks(path) -> dict:
    out: dict = {}

    def walk(o):
        if isinstance(o, dict):
            if "name" in o and "evidence" in o:
                out[o["name"]] = o
            for v in o.values():
                walk(v)
        elif isinstance(o, list):
            for v in o:
                walk(v)

    walk(json.loads(path.read_text()))
    return out


def _packed(tmp_path, n=30):
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in _pairs(n)))
    out = tmp_path / "p"
    r = cli("pack", data, "--len", "128", "--overflow", "truncate", "--out", out, "--no-cache")
    assert r.exit_code == 0, r.output
    return out


def test_sources_name_the_rows_source_index_not_the_side_key(tmp_path):
    """A trained token of a chosen side changed (re-signed): the message and the evidence give the
    source_index the row holds (not the pair key 2 * source_index + side)."""
    out = _packed(tmp_path)
    shard = next((out / "data").glob("*.parquet"))
    rows = pq.read_table(shard).to_pylist()
    r = next(i for i, row in enumerate(rows) if row["source_index"][0] >= 2)
    row, s = rows[r], rows[r]["source_index"][0]
    t = next(i for i, v in enumerate(row["labels"][: row["seq_lengths"][0]]) if v != -100 and i)
    row["input_ids"][t] = row["labels"][t] = 7 if row["input_ids"][t] != 7 else 8
    pq.write_table(pa.Table.from_pylist(rows, schema=pq.read_schema(shard)), shard)
    _resign(out)
    v = cli("verify", out, "--sources", "--rows", "0", "--json", tmp_path / "v.json")
    assert v.exit_code == 1, v.output
    tok = _checks(tmp_path / "v.json")["sources tokens"]
    assert f"pairs.jsonl:{s + 1} (chosen) (source_index {s}) -> " in tok["message"], tok["message"]
    first = tok["evidence"]["first"][0]
    assert (first["source_index"], first["row"], first["document"]) == (s, r, 0)


def test_sample_counts_and_picks_whole_pairs(tmp_path):
    out = _packed(tmp_path)
    v = cli("verify", out, "--sources", "--rows", "0", "--json", tmp_path / "all.json")
    assert v.exit_code == 0, v.output
    ev = _checks(tmp_path / "all.json")["sources tokens"]["evidence"]
    assert ev["records_compared"] == ev["records_packed"] == 30 and ev["documents"] == 60
    v = cli(
        "verify", out, "--sources", "--rows", "0", "--sample", "3", "--json", tmp_path / "s.json"
    )
    assert v.exit_code == 0, v.output
    tok = _checks(tmp_path / "s.json")["sources tokens"]
    assert tok["message"].startswith("3 of 30 packed records (--sample 3, --seed 0): 6 documents")
    ev = tok["evidence"]
    assert ev["records_compared"] == 3 and ev["documents"] == 6
    assert len(ev["sampled_source_index"]) == 3 and all(
        0 <= i < 30 for i in ev["sampled_source_index"]
    )

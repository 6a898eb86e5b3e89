"""The one shard-schema check, on the v1 fixture's shard and on damaged schemas."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
from paths import TESTS

from packtool import schema

SHARD = TESTS / "fixtures" / "v1_pack" / "data" / "train-00000-of-00001.parquet"


def test_a_written_shard_matches_the_schema():
    got = pq.ParquetFile(SHARD).schema_arrow
    assert schema.pack_len_of(got) == 2048
    assert schema.shard_schema_problems(got, 2048) == []
    assert got.names == list(schema.COLUMNS)


def test_problems_are_named():
    good = schema.arrow_schema(16)
    assert schema.shard_schema_problems(good, 32) == [
        f"column {c} is fixed_size_list<item: int32>[16], expected fixed_size_list<item: int32>[32]"
        for c in schema.TOKEN_COLUMNS
    ]
    masked = good.append(pa.field("attention_mask", pa.list_(pa.int8(), 16)))
    assert (
        schema.shard_schema_problems(masked, 16)[0]
        == "forbidden column 'attention_mask' (schema v1 has none)"
    )
    dropped = good.remove(good.get_field_index("labels"))
    assert schema.shard_schema_problems(dropped, 16) == ["column labels is missing"]
    extra = good.append(pa.field("weights", pa.float32()))
    assert schema.shard_schema_problems(extra, 16) == ["unexpected columns ['weights']"]
    v2 = good.with_metadata({b"packtool_schema_version": b"2"})
    assert schema.shard_schema_problems(v2, 16) == ["schema version 2 != 1"]
    assert schema.pack_len_of(pa.schema([pa.field("x", pa.int32())])) is None


def test_padded_packs_have_seq_lengths_unpadded_and_only_they():
    padded = schema.arrow_schema(16, padded=True)
    assert padded.names == [*schema.arrow_schema(16).names, schema.UNPADDED_COLUMN]
    assert schema.shard_schema_problems(padded, 16, padded=True) == []
    assert schema.shard_schema_problems(schema.arrow_schema(16), 16, padded=True) == [
        "column seq_lengths_unpadded is missing"
    ]
    assert schema.shard_schema_problems(padded, 16) == [
        "unexpected columns ['seq_lengths_unpadded']"
    ]

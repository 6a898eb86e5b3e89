"""Readers for input records and the Parquet shard writer."""

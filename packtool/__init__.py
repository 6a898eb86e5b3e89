"""packtool: profile SFT datasets, pack them into static-length Parquet shards, verify the shards."""

__version__ = "0.1.0"

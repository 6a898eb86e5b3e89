"""Tokenization: raw records in, a checked, memory-mapped table of (input_ids, labels) out.

Read the modules in this order:

    source.py        RecordSource: locates the input once, streams RawBatches with file and line,
                     owns --on-error and the list of skipped records
    encode.py        EncodeStep: one batch of raw records → one Arrow batch (parse, normalize,
                     render, tokenize, label); picklable, run in worker processes
      chatml.py      the native renderer of the built-in chatml-train template
      backends.py    fastokens and tokenizers backends: ids and the trained-token mask
      pretokenized.py  vectorized validation of records that already carry input_ids
    cache.py         cache entries: written once as Arrow IPC, checksummed, memory-mapped
    pipeline.py      source → encode (num_proc workers, start-up check of the fast path) → cache
    loading.py       tokenizers (resolved once, cached as a TokenizerSpec) and chat templates

transformers is imported lazily inside functions: `import packtool.cli` must stay light.
"""

"""Tokenization: raw records in, a checked, memory-mapped table of (input_ids, labels) out.

    pipeline.py      load_tokenized: plan_run (RunPlan, FastCheck) → cache → decide → executor.map(
                     step, parts) → probes / retry → commit (locally; on Ray: packtool.cluster)
    source.py        RecordSource: the input's batches with file and line, --on-error, skipped
                     records; each file's FileDecision (input kind, format)
    encode.py        EncodeStep: a batch of raw records → one Arrow batch (parse, normalize,
                     Encoder.encode); picklable, run in worker processes
    render/          Renderer: messages → text + char spans to train (native → compiled → jinja)
    backends.py      text + spans → ids + trained-token mask (fastokens or tokenizers), byte rules
    loading.py       TokenizerSpec: a tokenizer resolved once, cached on disk; its Engines
    chat_template.py which template (ours, TRL's, the tokenizer's or a file) and its mode (probed)
    label_audit.py   what is trained that the data lacks, control tokens in text, the run's meta
    cache.py         cache entries: written once as Arrow IPC, checksummed, memory-mapped
    pretokenized.py  records that already carry input_ids: one at a time, or a batch vectorized
    pairs.py, mixture.py, cut.py   preference pairs; weighted inputs; a BPE cut for `inspect`

transformers is imported lazily inside functions: `import packtool.cli` must stay light.
"""

"""Tokenization: raw records in, a checked, memory-mapped table of (input_ids, labels) out.

One chat record → input_ids + labels, in four files (read in this order):

    encode.py        EncodeStep: a batch of raw records → one Arrow batch (parse, normalize,
                     Encoder.encode); picklable, run in worker processes
    ../formats.py    normalize: the record in its format (messages, sharegpt, ...) → an example
    render.py        Renderer.conversation: the example's messages → text + char spans to train,
                     by the template's mode (markers | prefix | last | all)
    backends.py      fastokens and tokenizers backends: text + spans → ids + trained-token mask

Around it:

    source.py        RecordSource: locates the input once, streams RawBatches with file and line,
                     owns --on-error and the list of skipped records
    loading.py       tokenizers (resolved once, cached as a TokenizerSpec)
    chat_template.py   which template: ours, TRL's, the tokenizer's or a file; families, fixes
    template_probe.py  its mode, decided on a probe conversation (`choose`)
    chatml.py        the native renderer of the built-in chatml-train template
    label_audit.py   what is trained that the data lacks: per example, summed per run
    pretokenized.py  records that already carry input_ids: the checks, one record at a time
      pretokenized_batch.py  the same checks vectorized over an Arrow batch
    cache.py         cache entries: written once as Arrow IPC, checksummed, memory-mapped
    mixture.py       several inputs, weighted, into one table
    pipeline.py      source → encode (num_proc workers, start-up check of the fast path) → cache

transformers is imported lazily inside functions: `import packtool.cli` must stay light.
"""

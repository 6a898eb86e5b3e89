"""Tokenization: raw records in, a checked, memory-mapped table of (input_ids, labels) out.

One chat record → input_ids + labels, in four files (read in this order):

    encode.py        EncodeStep: a batch of raw records → one Arrow batch (parse, normalize,
                     Encoder.encode); picklable, run in worker processes
      content_tokens.py  control tokens typed in message text: found, kept, refused or split
    ../formats/      normalize: the record in its format (messages, sharegpt, ...) → an example
    render/          Renderer.conversation: the example's messages → text + char spans to train,
                     by the template's mode (markers | prefix | last | all); one chain of
                     renderers, native → compiled (MiniJinja) → jinja (the reference), and the
                     run's choice (`best`)
    backends.py      fastokens and tokenizers backends: text + spans → ids + trained-token mask
    byte_rules.py    which tokenizers fastokens serves, and each token id's UTF-8 byte length

A run, decided once and executed (locally here, on Ray by packtool.cluster with the same plan):

    pipeline.py      load_tokenized: cache → decide → plan → executor.map(step, parts) →
                     probes / retry → commit; Run, Stats, the finished run's meta
      decide.py      each file's FileDecision (input kind, format), from its leading batches
      run_plan.py    RunPlan (steps, tokenizer, template, BackendReport) from plan_run(cfg,
                     decisions); FastCheck: the fast path against the reference on each file's
                     head (a difference: the run continues on the reference path)
    ../forking.py    ordered_map: the local executor (worker processes, in order)

Around it:

    source.py        RecordSource: locates the input once, streams RawBatches with file and line,
                     owns --on-error and the list of skipped records
    loading.py       tokenizers (resolved once, cached as a TokenizerSpec)
    chat_template.py   which template: ours, TRL's, the tokenizer's or a file; families, fixes
    template_probe.py  its mode, decided on a probe conversation (`choose`)
    label_audit.py   what is trained that the data lacks: per example, summed per run
    pretokenized.py  records that already carry input_ids: the checks, one record at a time
      pretokenized_batch.py  the same checks vectorized over an Arrow batch
    cache.py         cache entries: written once as Arrow IPC, checksummed, memory-mapped
    mixture.py       several inputs, weighted, into one table

transformers is imported lazily inside functions: `import packtool.cli` must stay light.
"""

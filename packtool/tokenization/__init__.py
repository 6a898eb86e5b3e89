"""Tokenization: raw records in, a checked, memory-mapped table of (input_ids, labels) out.

One chat record → input_ids + labels (read in this order):

    encode.py        EncodeStep: a batch of raw records → one Arrow batch (parse, normalize,
                     Encoder.encode); picklable, run in worker processes
    ../formats/      normalize: the record in its format (messages, sharegpt, ...) → an example
    render/          Renderer.conversation: the example's messages → text + char spans to train,
                     by the template's mode (markers | prefix | last | all); one chain of
                     renderers, native → compiled (MiniJinja) → jinja (the reference), and the
                     run's choice (`best`)
    backends.py      Engines (one tokenizer's built forms: tokenizers, fastokens, the byte table;
                     spec.engines) and the two backends: text + spans → ids + trained-token mask
    byte_rules.py    which tokenizers fastokens serves, and each token id's UTF-8 byte length
    label_audit.py   what is trained that the data lacks (per example, summed per run), and
                     control tokens typed in message text (kept, refused or split)

A run, decided once and executed (locally here, on Ray by packtool.cluster with the same plan):

    pipeline.py      load_tokenized: cache → decide → plan → executor.map(step, parts) →
                     probes / retry → commit; Run, Stats, the finished run's meta
      source.py      RecordSource: locates the input once, streams RawBatches with file and
                     line, owns --on-error and the skipped records; each file's FileDecision
                     (input kind, format) from its leading batches
      run_plan.py    RunPlan (steps, tokenizer, template, BackendReport) from plan_run(cfg,
                     decisions); FastCheck: the fast path against the reference on each file's
                     head (a difference: the run continues on the reference path)
    ../forking.py    ordered_map: the local executor (worker processes, in order)

Around it:

    loading.py       TokenizerSpec: a tokenizer resolved once, cached on disk; its engines
    chat_template.py   which template: ours, TRL's, the tokenizer's or a file; families, fixes
    template_probe.py  its mode, decided on a probe conversation (`choose`)
    pretokenized.py  records that already carry input_ids: the checks, one record at a time
      pretokenized_batch.py  the same checks vectorized over an Arrow batch
    cache.py         cache entries: written once as Arrow IPC, checksummed, memory-mapped
    mixture.py       several inputs, weighted, into one table
    cut.py           for `inspect`: a BPE tokenizer cut to one example's words

transformers is imported lazily inside functions: `import packtool.cli` must stay light.
"""

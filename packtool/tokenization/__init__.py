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
    pipeline.py      load_tokenized: cache → decide → plan → execute → finish, in this order:
      decide.py      each file's FileDecision (input kind, format), from its leading batches
      run_plan.py    RunPlan (steps, tokenizer, template, BackendReport) from plan_run(cfg, decisions)
      fast_check.py  FastCheck: the fast path against the reference on each file's head
      execute.py     the local executor: the plan's step in num_proc worker processes, in order
      run_meta.py    the finished run's meta (formats, warnings, label audit, backend)
    loading.py       tokenizers (resolved once, cached as a TokenizerSpec) and chat templates

transformers is imported lazily inside functions: `import packtool.cli` must stay light.
"""

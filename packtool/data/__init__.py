"""What the tokenization layer hands to `profile` and `pack`, one module per role:

    tokenized.py    TokenizedData: the tokenized table (memory-mapped) + lengths, loss counts,
                    source indices as numpy, and what the run recorded (format, tokenizer, options)
    arrow.py        the tokenized Arrow schema, zero-copy numpy <-> Arrow, token_batch
    labels.py       labels stored as labels or as a 1-byte loss_mask: every reader's accessors
    provenance.py   SourceFile, FileFormat, SkippedRecord: which files, read how, what was skipped
    blocks.py       a mixture's InputBlocks: the source-index block of each input

Import from the module (`from packtool.data.tokenized import TokenizedData`): this file re-exports
nothing.
"""

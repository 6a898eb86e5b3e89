"""What the tokenization layer hands to `profile` and `pack`:

    tokenized.py    TokenizedData: the tokenized table (memory-mapped) + lengths, loss counts,
                    source indices as numpy, what the run recorded (format, tokenizer, options),
                    where its records came from (SourceFile, FileFormat, SkippedRecord), a
                    mixture's InputBlocks, and the Arrow schema and zero-copy helpers
    labels.py       labels stored as labels or as a 1-byte loss_mask: every reader's accessors

Import from the module (`from packtool.data.tokenized import TokenizedData`): this file re-exports
nothing.
"""

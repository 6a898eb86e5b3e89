"""What the tokenization layer hands to `profile` and `pack`: tokenized.py (TokenizedData, its Arrow
table and provenance), labels.py (labels stored as labels or as a loss_mask; the zero-copy Arrow
helpers). Import from the modules: this file re-exports nothing.
"""

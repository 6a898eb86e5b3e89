"""Tokenization: raw records in, a checked, memory-mapped table of (input_ids, labels) out
(pipeline.load_tokenized; its modules: docs/ARCHITECTURE.md, "Module map").

transformers is imported lazily inside functions: `import packtool.cli` must stay light.
"""

"""Tokenization: tokenizer and template loading, labels from chat templates, the cached pipeline.

transformers is imported lazily inside functions: `import packtool.cli` must stay light.
"""

"""Renderers: one module per command turns a result object into rich tables (stderr), JSON, PNG."""

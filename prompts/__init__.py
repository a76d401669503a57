"""Jinja2 prompt templates, shipped as the `rca_prompts` package (see prompts/README.md)."""

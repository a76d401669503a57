"""The analyst stage: an LLM (any OpenAI-compatible endpoint) writes the ranked hypotheses from the
findings, validated against them; the deterministic rules ranking is used whenever it cannot.

summary.py builds the compact evidence the prompt carries and trims it to the token budget,
prompts.py renders `prompts/*.j2`, client.py talks to the endpoint, validate.py checks the answer,
cache.py reuses an answer for the same evidence, explain.py ties them together.
"""

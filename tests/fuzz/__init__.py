"""A corpus-driven fuzzer of the webhook and the API: seed payloads (corpus.py), mutated
deterministically by a seeded RNG (mutators.py), sent and judged (engine.py). Used by
tests/api/test_fuzz.py (a fixed seed, in CI) and bench/fuzz_intake.py (thousands of requests
against a real `rca serve`)."""

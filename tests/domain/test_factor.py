"""The common factor of a fleet incident's affected hosts against their healthy peers: named only
when it separates them cleanly, with the counts; never claimed without peers to compare with."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from rca.domain.factor import CommonFactor, HostFacts, Verdict, decide

ONSET = datetime(2027, 2, 16, 12, 0, tzinfo=UTC)
OLD = "vllm/vllm-openai:v0.11.0"
NEW = "vllm/vllm-openai:v0.12.1"


def host(name: str, affected: bool, image: str, pool: str = "a100", started: datetime | None = None) -> HostFacts:
    return HostFacts(
        name,
        affected,
        {"image": frozenset({image}), "node_label:pool": frozenset({pool}), "model": frozenset({"llama"})},
        started,
    )


def fleet(affected_image: str = NEW, healthy_images: tuple[str, ...] = (OLD, OLD, OLD)) -> list[HostFacts]:
    return [host(f"gpu-{i}", True, affected_image) for i in range(3)] + [
        host(f"gpu-{i + 3}", False, image) for i, image in enumerate(healthy_images)
    ]


def test_an_image_every_affected_host_runs_and_no_healthy_one_does_is_named_with_the_counts() -> None:
    factor = decide(fleet(), ONSET)
    assert factor is not None and factor.verdict == Verdict.FOUND
    assert (factor.attribute, factor.value) == ("image", NEW)
    assert (factor.affected, factor.affected_of, factor.healthy, factor.healthy_of) == (3, 3, 0, 3)
    assert factor.line() == (
        f"Common factor: image {NEW}: 3 of 3 affected, 0 of 3 healthy: "
        f"compare {NEW} with the healthy hosts' and roll back if it is new"
    )


def test_an_image_the_healthy_hosts_run_too_is_no_factor() -> None:
    factor = decide(fleet(healthy_images=(NEW, NEW, OLD)), ONSET)
    assert factor is not None and factor.verdict == Verdict.NONE
    assert factor.line() == "No common factor among the 3 affected hosts and their 3 healthy peers"


def test_one_healthy_host_in_five_sharing_it_still_separates_them_but_not_one_in_three() -> None:
    five = decide(fleet(healthy_images=(NEW, OLD, OLD, OLD, OLD)), ONSET)
    assert five is not None and (five.verdict, five.healthy, five.healthy_of) == (Verdict.FOUND, 1, 5)
    three = decide(fleet(healthy_images=(NEW, OLD, OLD)), ONSET)
    assert three is not None and three.verdict == Verdict.NONE


def test_without_healthy_peers_nothing_is_claimed() -> None:
    factor = decide(fleet(healthy_images=()), ONSET)
    assert factor is not None and factor.verdict == Verdict.UNJUDGED and factor.attribute is None
    assert "cannot be judged: no healthy peers" in factor.line()


def test_a_host_alone_needs_no_factor() -> None:
    assert decide([host("gpu-0", True, NEW), host("gpu-1", False, OLD)], ONSET) is None


def test_the_most_specific_factor_wins_the_image_over_the_node_pool() -> None:
    facts = [host(f"gpu-{i}", True, NEW, pool="h100") for i in range(2)] + [
        host(f"gpu-{i}", False, OLD, pool="a100") for i in range(2, 5)
    ]
    factor = decide(facts, ONSET)
    assert factor is not None and (factor.attribute, factor.value) == ("image", NEW)


def test_a_node_pool_is_named_when_the_images_are_all_alike() -> None:
    facts = [host(f"gpu-{i}", True, OLD, pool="h100") for i in range(2)] + [
        host(f"gpu-{i}", False, OLD, pool="a100") for i in range(2, 5)
    ]
    factor = decide(facts, ONSET)
    assert factor is not None and (factor.attribute, factor.value) == ("node_label:pool", "h100")
    assert factor.line() == (
        "Common factor: node label pool=h100: 2 of 2 affected, 0 of 3 healthy: "
        "cordon those nodes and check their hardware, or move the pods off them"
    )


def test_an_engine_flag_only_the_affected_engines_run_with_is_named_before_their_node_pool() -> None:
    flag = "engine_config:enable_prefix_caching"
    facts = [
        HostFacts(f.host, f.affected, {**f.attributes, flag: frozenset({"False" if f.affected else "True"})})
        for f in fleet(healthy_images=(NEW, NEW, NEW))
    ]
    factor = decide(facts, ONSET)
    assert factor is not None and (factor.attribute, factor.value) == (flag, "False")
    assert factor.next_step == "compare the engine's enable_prefix_caching=False with the healthy hosts'"


def test_an_attribute_not_measured_on_every_affected_host_is_not_claimed() -> None:
    facts = fleet()
    facts[0] = HostFacts("gpu-0", True, {"model": frozenset({"llama"})})
    factor = decide(facts, ONSET)
    assert factor is not None and factor.verdict == Verdict.NONE


def test_a_rollout_shortly_before_onset_on_the_affected_hosts_only_turns_the_image_into_roll_back() -> None:
    rolled = ONSET - timedelta(minutes=40)
    facts = [host(f"gpu-{i}", True, NEW, started=rolled + timedelta(minutes=i)) for i in range(3)] + [
        host(f"gpu-{i}", False, OLD, started=ONSET - timedelta(days=3)) for i in range(3, 6)
    ]
    factor = decide(facts, ONSET)
    assert factor is not None and (factor.attribute, factor.rollout_minutes) == ("image", 40)
    assert factor.line() == (
        f"Common factor: image {NEW}: 3 of 3 affected, 0 of 3 healthy; rolled out 40 min before onset: roll back"
    )


def test_a_rollout_alone_is_a_factor_of_its_own_but_not_when_the_healthy_restarted_too() -> None:
    recent, old = ONSET - timedelta(minutes=20), ONSET - timedelta(days=3)
    facts = [host(f"gpu-{i}", True, OLD, started=recent) for i in range(3)] + [
        host(f"gpu-{i}", False, OLD, started=old) for i in range(3, 6)
    ]
    factor = decide(facts, ONSET)
    assert factor is not None and (factor.verdict, factor.attribute, factor.rollout_minutes) == (
        Verdict.FOUND,
        "rollout",
        20,
    )
    assert factor.line().startswith("Common factor: restarted 20 min before onset: 3 of 3 affected, 0 of 3 healthy")
    everyone = [HostFacts(f.host, f.affected, f.attributes, recent) for f in facts]
    again = decide(everyone, ONSET)
    assert again is not None and again.verdict == Verdict.NONE


def test_a_factor_survives_its_stored_form() -> None:
    factor = decide(fleet(), ONSET)
    assert factor is not None and CommonFactor.from_dict(factor.to_dict()) == factor

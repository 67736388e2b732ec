from uuid import uuid4

from replication.topology import arrivals, origin_conflicts

A, B, C = uuid4(), uuid4(), uuid4()


def test_topics_flow_along_chains():
    held = {1: {"t": A}, 2: {}, 3: {}}
    assert arrivals([(1, 2), (2, 3)], held)[3] == {"t": {A}}


def test_multimaster_ring_with_distinct_topic_names_is_sound():
    held = {1: {"a": A}, 2: {"b": B}, 3: {"c": C}}
    assert origin_conflicts([(1, 2), (2, 3), (3, 1)], held) == []


def test_ring_with_one_topic_name_at_two_origins_conflicts_everywhere():
    held = {1: {"t": A}, 2: {"t": B}, 3: {}}
    conflicts = origin_conflicts([(1, 2), (2, 3), (3, 1)], held)
    assert {c.stream for c in conflicts} == {1, 2, 3}
    assert all(c.topic == "t" and c.origins == {A, B} for c in conflicts)


def test_two_primaries_feeding_one_secondary_with_one_topic_name_conflict():
    # The seeds' warning: two primaries with the same topic name into one secondary.
    conflicts = origin_conflicts([(1, 3), (2, 3)], {1: {"t": A}, 2: {"t": B}})
    assert [(c.stream, c.topic) for c in conflicts] == [(3, "t")]


def test_a_copied_topic_keeps_its_single_origin():
    # Replicas hold copies of the origin's topics; a copy is not a second origin.
    assert origin_conflicts([(1, 2)], {1: {"t": A}, 2: {"t": A}}) == []

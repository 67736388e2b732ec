import pytest

from replication.errors import InvalidInput
from replication.paths import (
    parse_stream_path,
    parse_topic_path,
    validate_cluster_name,
    validate_topic_name,
)
from replication.services.clusters import validate_gateway_address


@pytest.mark.parametrize(
    ("text", "cluster", "name"),
    [
        ("/mapr/sanfrancisco/activity", "sanfrancisco", "activity"),
        ("mapr/sanfrancisco/activity", "sanfrancisco", "activity"),  # seed 004's last command
        ("/mapr/ny/apps/clicks.v2", "ny", "apps/clicks.v2"),
        ("  /mapr/ny/a_b-c  ", "ny", "a_b-c"),
    ],
)
def test_stream_paths_parse_as_mapr_writes_them(text, cluster, name):
    path = parse_stream_path(text)
    assert (path.cluster, path.name) == (cluster, name)
    assert str(path) == f"/mapr/{cluster}/{name}"


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", "required"),
        ("/mapr/sf", "/mapr/<cluster>/<stream>"),
        ("/data/sf/activity", "/mapr/<cluster>/<stream>"),
        ("/mapr/sf//activity", "empty segments"),
        ("/mapr/sf/../etc", "invalid path segment"),
        ("/mapr/sf/act:ivity", "invalid path segment"),
        ("/mapr/-sf/activity", "invalid cluster name"),
        ("/mapr/sf/" + "a" * 1100, "longer than"),
    ],
)
def test_malformed_stream_paths_are_refused_with_the_fix(text, words):
    with pytest.raises(InvalidInput) as err:
        parse_stream_path(text)
    assert words in err.value.desc


def test_topic_paths_split_stream_and_topic():
    stream, topic = parse_topic_path("/mapr/sf/activity:clicks")
    assert (str(stream), topic) == ("/mapr/sf/activity", "clicks")


@pytest.mark.parametrize("text", ["/mapr/sf/activity", "/mapr/sf/activity:", "/mapr/sf/a:b c"])
def test_malformed_topic_paths_are_refused(text):
    with pytest.raises(InvalidInput):
        parse_topic_path(text)


# `$` also matches before a final newline: every name is matched whole (issue 27).
@pytest.mark.parametrize("text", ["/mapr/sanfrancisco/acme\n/orders",
                                  "/mapr/sanfrancisco\n/acme/orders"])
def test_a_segment_with_a_trailing_newline_is_refused(text):
    with pytest.raises(InvalidInput, match="invalid"):
        parse_stream_path(text)


def test_a_topic_or_cluster_name_with_a_trailing_newline_is_refused():
    with pytest.raises(InvalidInput, match="invalid topic name 'payments\\\\n'"):
        validate_topic_name("payments\n")
    with pytest.raises(InvalidInput, match="invalid topic name"):
        parse_topic_path("/mapr/sanfrancisco/acme:payments\n")
    with pytest.raises(InvalidInput, match="invalid cluster name"):
        validate_cluster_name("tokyo\n")


def test_a_gateway_address_with_a_trailing_newline_is_refused():
    with pytest.raises(InvalidInput, match="invalid gateway address"):
        validate_gateway_address("gw1:7660\n")

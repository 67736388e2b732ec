"""`manage.py runkafka` refuses bad options with the fix, before it binds anything."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from broker.server import split_address, stable_node_id


@pytest.mark.parametrize(("flags", "message"), [
    (["--listen", "9092"], "is not HOST:PORT"),
    (["--advertise", "host:99999"], "is not HOST:PORT"),
    (["--cluster", "bad/name"], "invalid cluster name"),
    (["--defaultstream", "orders"], "write it as /mapr/<cluster>/<stream>"),
])
def test_bad_options_are_refused_with_the_fix(flags, message):
    with pytest.raises(CommandError, match=message):
        call_command("runkafka", *flags)


def test_node_ids_are_stable_per_advertised_address():
    assert stable_node_id("10.0.0.1", 9092) == stable_node_id(*split_address("10.0.0.1:9092"))
    assert stable_node_id("10.0.0.1", 9092) != stable_node_id("10.0.0.2", 9092)
    assert 0 <= stable_node_id("kafka-1", 9092) < 2**30

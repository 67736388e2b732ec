"""REDIS_URL's two forms (replication/engine/redisurl.py): a plain server, or a Redis Sentinel
group that every client (transports, Celery, channels-redis, the cache) reaches by its master's
name. The failover itself is proven against real sentinels in tests/ha."""

from __future__ import annotations

import pytest

from replication.engine.redisurl import (
    address,
    celery_broker,
    channel_host,
    parse_sentinel,
)
from replication.stores import default_store_url

URL = "sentinel://:s3cret@10.0.0.1:26379,10.0.0.2:26380/mymaster/2"


def test_sentinel_url_names_every_sentinel_the_master_and_the_database():
    found = parse_sentinel(URL)
    assert found.sentinels == [("10.0.0.1", 26379), ("10.0.0.2", 26380)]
    assert (found.master, found.db, found.password) == ("mymaster", 2, "s3cret")
    assert parse_sentinel("sentinel://h1,h2/m").sentinels == [("h1", 26379), ("h2", 26379)]
    assert parse_sentinel("redis://127.0.0.1:6379/0") is None


@pytest.mark.parametrize("bad", ["sentinel://h:1", "sentinel://h:port/m/0", "sentinel:///m/0",
                                 "sentinel://h:1/m/x"])
def test_a_malformed_sentinel_url_is_refused_naming_the_form(bad):
    with pytest.raises(ValueError, match="sentinel://host:port,host:port/master-name/db"):
        parse_sentinel(bad)


def test_celery_gets_one_sentinel_url_each_and_the_master_name():
    broker, options = celery_broker(URL)
    assert broker == ("sentinel://:s3cret@10.0.0.1:26379/2;sentinel://:s3cret@10.0.0.2:26380/2")
    assert options == {"master_name": "mymaster"}
    assert celery_broker("redis://r:6379/0") == ("redis://r:6379/0", {})


def test_the_channel_layer_gets_the_sentinels_and_address_hides_the_password():
    assert channel_host(URL) == {"sentinels": [("10.0.0.1", 26379), ("10.0.0.2", 26380)],
                                 "master_name": "mymaster", "db": 2, "password": "s3cret"}
    assert "s3cret" not in address(URL) and "mymaster" in address(URL)
    assert address("redis://:pw@r:6380/0") == "r:6380"


def test_a_store_beside_a_replicated_control_database_keeps_its_hosts_and_attrs(settings, db):
    from django.db import connection

    saved = dict(connection.settings_dict)
    connection.settings_dict.update(HOST="a,b,c", PORT="1,2,3", NAME="ctl", USER="u",
                                    PASSWORD="", OPTIONS={"target_session_attrs": "read-write",
                                                          "tcp_user_timeout": "15000",
                                                          "pool": {"min_size": 1}})
    try:
        url = default_store_url("NY")
    finally:
        connection.settings_dict.clear()
        connection.settings_dict.update(saved)
    assert url == ("postgresql://u@a:1,b:2,c:3/ctl_store_ny?target_session_attrs=read-write"
                   "&tcp_user_timeout=15000")

"""A cluster's store group where the operator looks: the cluster's page, `cluster info` on
/rest and /metrics, on the single-server default (one PostgreSQL server, no Patroni: one
member, the leader, one copy), and the copies alarm beside it while one is open. The same on a
Patroni group with standbys and a failover: tests/ha/test_required_copies.py."""

import psycopg
import pytest
from django.utils import timezone

from operations.models import Alarm, AlarmKind
from replication.stores import store_url
from tests.clients import signed_in
from tests.portal.test_metrics import samples
from tests.portal.test_rest import call, ok


def server_timeline(url: str) -> int:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT timeline_id FROM pg_control_checkpoint()").fetchone()[0]


def test_cluster_info_on_one_server_shows_one_member_the_leader(api, owner, sanfrancisco):
    (info,) = ok(call(api(owner), "cluster/info", name="sanfrancisco"))
    assert (info["requiredcopies"], info["copies"], info["copiesOk"]) == (1, 1, True)
    (member,) = info["members"]
    assert (member["role"], member["state"], member["lagBytes"]) == ("leader", "serving", 0)
    assert member["name"].endswith(":5432")
    assert info["timeline"] == server_timeline(store_url(sanfrancisco))
    # A server that never failed over has no timeline history, so no failover time.
    assert (info["lastFailover"] is None) == (info["timeline"] == 1)
    assert info["alarm"] is None


def test_the_clusters_page_shows_the_group_and_links_each_cluster(owner, sanfrancisco,
                                                                   newyork):
    page = signed_in(owner).get("/clusters/")
    assert page.status_code == 200
    text = page.content.decode()
    assert 'href="/clusters/sanfrancisco/"' in text and 'href="/clusters/newyork/"' in text
    detail = signed_in(owner).get("/clusters/sanfrancisco/").content.decode()
    assert "Cluster sanfrancisco" in detail
    assert '<dd data-field="copies">1 of 1 required</dd>' in detail
    assert '<dd data-field="members">1</dd>' in detail
    assert '<td data-label="Role" data-field="role">leader</td>' in detail
    assert 'data-field="alarm"' not in detail


def test_the_cluster_page_shows_the_copies_alarm_and_the_alarm_links_to_it(
        api, owner, operator, sanfrancisco, activity):
    Alarm.objects.create(kind=AlarmKind.COPIES_SHORT, key=f"cluster:{sanfrancisco.pk}:copies",
                         entity="sanfrancisco", cluster=sanfrancisco, raised=timezone.now(),
                         description="cluster sanfrancisco requires 2 copies of every "
                                     "acknowledged message but its store's commits are on 1 now")
    detail = signed_in(owner).get("/clusters/sanfrancisco/").content.decode()
    assert 'role="alert" data-field="alarm"' in detail and "are on 1 now" in detail
    (info,) = ok(call(api(operator), "cluster/info", name="sanfrancisco"))
    assert "are on 1 now" in info["alarm"]
    overview = signed_in(owner).get("/").content.decode()
    assert 'href="/clusters/sanfrancisco/">See the store group</a>' in overview


def test_the_cluster_pages_need_a_sign_in_and_name_a_cluster(client, owner, sanfrancisco):
    assert client.get("/clusters/sanfrancisco/").status_code == 302
    assert signed_in(owner).get("/clusters/nowhere/").status_code == 404


@pytest.mark.django_db(transaction=True)
def test_metrics_show_each_store_groups_members_lag_and_copies(client, operator, sanfrancisco):
    client.force_login(operator)
    got = samples(client.get("/metrics").content.decode())
    cluster = (("cluster", "sanfrancisco"),)
    assert got[("streamgate_store_up", cluster)] == 1
    assert got[("streamgate_store_members", cluster)] == 1
    assert got[("streamgate_store_copies", cluster)] == 1
    assert got[("streamgate_store_required_copies", cluster)] == 1
    assert got[("streamgate_store_timeline", cluster)] == server_timeline(store_url(sanfrancisco))
    (leader,) = [labels for name, labels in got if name == "streamgate_store_member_role"]
    assert dict(leader)["role"] == "leader" and dict(leader)["state"] == "serving"
    member = (("cluster", "sanfrancisco"), ("member", dict(leader)["member"]))
    assert got[("streamgate_store_member_lag_bytes", member)] == 0


@pytest.mark.django_db(transaction=True)
def test_a_store_that_does_not_answer_shows_as_down_not_as_an_error(client, operator):
    from tests.factories import ClusterFactory

    ClusterFactory(name="gone", store_url="postgresql://postgres@127.0.0.1:1/gone_store")
    client.force_login(operator)
    page = client.get("/clusters/gone/")
    assert page.status_code == 200
    assert 'data-field="store-error"' in page.content.decode()
    got = samples(client.get("/metrics").content.decode())
    assert got[("streamgate_store_up", (("cluster", "gone"),))] == 0
    assert got[("streamgate_store_copies", (("cluster", "gone"),))] == 0


@pytest.mark.django_db(transaction=True)
def test_metrics_show_the_control_databases_group_as_a_stores(client, operator, settings):
    client.force_login(operator)
    got = samples(client.get("/metrics").content.decode())
    assert (got[("streamgate_control_db_up", ())], got[("streamgate_control_db_members", ())],
            got[("streamgate_control_db_copies", ())]) == (1, 1, 1)
    control = settings.DATABASES["default"]
    url = f"postgresql://{control['USER']}@{control['HOST']}:{control['PORT']}/{control['NAME']}"
    assert got[("streamgate_control_db_timeline", ())] == server_timeline(url)
    (leader,) = [dict(labels) for name, labels in got
                 if name == "streamgate_control_db_member_role"]
    assert (leader["role"], leader["state"]) == ("leader", "serving")
    assert got[("streamgate_control_db_member_lag_bytes", (("member", leader["member"]),))] == 0

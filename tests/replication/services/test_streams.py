import pytest

from accounts.models import Role
from replication.errors import AlreadyExists, InvalidInput, NotFound, PermissionDenied
from replication.models import DefaultStream, Stream
from replication.services import stream_create, stream_delete, stream_edit
from replication.services.defaultstreams import default_stream_set
from tests.factories import MembershipFactory, StreamFactory


def test_create_defaults_every_ace_to_the_creator(owner, sanfrancisco):
    stream = stream_create(actor=owner, path="/mapr/sanfrancisco/activity")
    assert [stream.produceperm, stream.adminperm, stream.copyperm] == ["u:alice"] * 3
    assert (stream.ttl, stream.defaultpartitions, stream.autocreate) == (604800, 1, True)
    assert stream.tenant.name == "acme"


def test_create_with_copymetafrom_copies_metadata_and_aces(owner, activity, newyork):
    stream_edit(actor=owner, stream=activity, ttl=3600, defaultpartitions=4,
                consumeperm="u:alice | g:analysts")
    copy = stream_create(actor=owner, path="/mapr/newyork/activity",
                         copymetafrom="/mapr/sanfrancisco/activity")
    assert (copy.ttl, copy.defaultpartitions) == (3600, 4)
    assert copy.consumeperm == "u:alice | g:analysts"


def test_explicit_options_override_copied_metadata(owner, activity, newyork):
    copy = stream_create(actor=owner, path="/mapr/newyork/activity", ttl=60,
                         copymetafrom=activity.path)
    assert copy.ttl == 60


def test_copymetafrom_needs_adminperm_on_the_source(owner, member, activity, newyork):
    with pytest.raises(PermissionDenied, match="adminperm"):
        stream_create(actor=member, path="/mapr/newyork/x", copymetafrom=activity.path)
    assert not Stream.objects.filter(path="/mapr/newyork/x").exists()


def test_copymetafrom_from_another_tenant_reads_as_missing(outsider, activity, newyork):
    with pytest.raises(NotFound, match="does not exist"):
        stream_create(actor=outsider, path="/mapr/newyork/x", copymetafrom=activity.path)


def test_create_refuses_unknown_cluster(owner):
    with pytest.raises(NotFound, match="cluster nowhere does not exist"):
        stream_create(actor=owner, path="/mapr/nowhere/activity")


def test_create_refuses_an_existing_path(owner, activity):
    with pytest.raises(AlreadyExists):
        stream_create(actor=owner, path="/mapr/sanfrancisco/activity")


@pytest.mark.parametrize("path", ["/mapr/sanfrancisco/activity/sub", "/mapr/sanfrancisco"])
def test_streams_do_not_nest(owner, activity, path):
    with pytest.raises(InvalidInput):
        stream_create(actor=owner, path=path)


def test_create_refuses_a_malformed_ace_with_its_position(owner, sanfrancisco):
    with pytest.raises(InvalidInput, match="adminperm: invalid ACE at position 9"):
        stream_create(actor=owner, path="/mapr/sanfrancisco/s", adminperm="u:alice |")
    assert not Stream.objects.exists()


@pytest.mark.parametrize(
    ("option", "value"),
    [("ttl", -1), ("defaultpartitions", 0), ("defaultpartitions", 5000),
     ("compression", "gzip"), ("defaulttimestamptype", "now"), ("ttl", "7d")],
)
def test_create_refuses_broken_metadata(owner, sanfrancisco, option, value):
    with pytest.raises(InvalidInput, match=option):
        stream_create(actor=owner, path="/mapr/sanfrancisco/s", **{option: value})
    assert not Stream.objects.exists()


def test_a_viewer_may_not_create_streams(sanfrancisco):
    viewer = MembershipFactory(user__username="vera", role=Role.VIEWER).user
    with pytest.raises(PermissionDenied, match="role"):
        stream_create(actor=viewer, path="/mapr/sanfrancisco/s")


def test_users_in_several_tenants_choose_one(owner, sanfrancisco):
    MembershipFactory(user=owner, tenant__name="initech")
    with pytest.raises(InvalidInput, match="-tenant"):
        stream_create(actor=owner, path="/mapr/sanfrancisco/s")
    stream = stream_create(actor=owner, path="/mapr/sanfrancisco/s", tenant="initech")
    assert stream.tenant.name == "initech"


def test_a_tenant_one_does_not_belong_to_is_refused(owner, outsider, sanfrancisco):
    with pytest.raises(NotFound, match="globex"):
        stream_create(actor=owner, path="/mapr/sanfrancisco/s", tenant="globex")


def test_edit_and_delete_need_adminperm(member, activity):
    with pytest.raises(PermissionDenied):
        stream_edit(actor=member, stream=activity, ttl=1)
    with pytest.raises(PermissionDenied):
        stream_delete(actor=member, stream=activity)
    activity.refresh_from_db()
    assert activity.ttl == 604800


def test_edit_with_nothing_to_change_is_an_error(owner, activity):
    with pytest.raises(InvalidInput, match="nothing to change"):
        stream_edit(actor=owner, stream=activity)


def test_another_tenants_stream_reads_as_missing(outsider, owner, activity):
    with pytest.raises(NotFound) as hidden:
        Stream.objects.restrict(outsider).by_path(activity.path)
    with pytest.raises(NotFound) as missing:
        Stream.objects.restrict(owner).by_path("/mapr/sanfrancisco/nothing")
    assert str(hidden.value).replace("activity", "X") == str(missing.value).replace(
        "nothing", "X"
    )


def test_group_and_role_terms_grant_permissions(owner, member, activity):
    from django.contrib.auth.models import Group

    member.groups.add(Group.objects.create(name="analysts"))
    stream_edit(actor=owner, stream=activity, consumeperm="u:alice | g:analysts",
                produceperm="r:admin")
    assert activity.allows(member, "consumeperm")
    assert not activity.allows(member, "produceperm")
    member.memberships.update(role=Role.ADMIN)
    assert activity.allows(member, "produceperm")


# --- another tenant's namespace reads like a missing object (issue 27) -----------------------

@pytest.mark.parametrize("path", ["/mapr/sanfrancisco/acme/archive",
                                  "/mapr/sanfrancisco/acme/archive/sub", "/mapr/sanfrancisco/acme"])
def test_a_path_in_another_tenants_namespace_is_refused_as_unavailable(owner, outsider,
                                                                       sanfrancisco, path):
    archive = StreamFactory(cluster=sanfrancisco, name="acme/archive", created_by=owner)
    with pytest.raises(NotFound, match=f"stream path {path} is not available") as error:
        stream_create(actor=outsider, path=path)
    assert archive.path not in str(error.value).replace(path, "<path>")
    assert "already exists" not in str(error.value) and "nest" not in str(error.value)
    assert list(Stream.objects.all()) == [archive]


@pytest.mark.parametrize("path", ["/mapr/sanfrancisco/acme/kafka",
                                  "/mapr/sanfrancisco/acme/kafka/x", "/mapr/sanfrancisco/acme"])
def test_nobody_else_creates_a_stream_where_a_tenants_default_stream_will_be(owner, outsider,
                                                                             sanfrancisco,
                                                                             path):
    default_stream_set(actor=owner, cluster="sanfrancisco", path="/mapr/sanfrancisco/acme/kafka")
    with pytest.raises(NotFound, match="is not available"):
        stream_create(actor=outsider, path=path)
    assert not Stream.objects.exists()
    # The owner's tenant still creates it, on first use or by hand.
    created = stream_create(actor=owner, path="/mapr/sanfrancisco/acme/kafka")
    assert created.tenant.name == "acme"


def test_nobody_else_names_a_tenants_default_stream_as_their_own(owner, outsider, sanfrancisco):
    default_stream_set(actor=owner, cluster="sanfrancisco", path="/mapr/sanfrancisco/kafka")
    with pytest.raises(NotFound, match="is not available"):
        default_stream_set(actor=outsider, cluster="sanfrancisco",
                           path="/mapr/sanfrancisco/kafka")
    assert list(DefaultStream.objects.values_list("tenant__name", flat=True)) == ["acme"]


def test_own_tenants_clashes_still_name_the_stream(owner, activity):
    with pytest.raises(InvalidInput, match="would nest with stream /mapr/sanfrancisco/activity"):
        stream_create(actor=owner, path="/mapr/sanfrancisco/activity/sub")

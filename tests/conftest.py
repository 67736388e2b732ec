"""Shared fixtures: an owner, a member with less permission, an outsider from another tenant,
an operator, and the seed documents' two clusters."""

import os

import pytest
from rest_framework.test import APIClient

from accounts.models import Role
from replication.services import replica_add, topic_create, upstream_add
from replication.stores import store_for
from tests.factories import ClusterFactory, MembershipFactory, StreamFactory, UserFactory


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix):
    # Several test runs may share one PostgreSQL server (developers, CI, helpers); each run
    # gets a database of its own so they never trample one another.
    from django.conf import settings

    test = settings.DATABASES["default"].setdefault("TEST", {})
    test["NAME"] = f"test_{settings.DATABASES['default']['NAME']}_{os.getpid()}"


@pytest.fixture(scope="session", autouse=True)
def _drop_cluster_stores(django_db_setup, django_db_blocker):
    """Cluster stores are databases of their own beside the test database; drop them too."""
    yield
    import psycopg
    from django.db import connection

    from replication.stores import close_stores

    close_stores()
    params = connection.settings_dict
    prefix = f"{params['NAME']}_store_"
    admin = f"postgresql://{params['USER']}@{params['HOST'] or '127.0.0.1'}/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        names = conn.execute("SELECT datname FROM pg_database WHERE starts_with(datname, %s)",
                             [prefix]).fetchall()
        for (name,) in names:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(autouse=True)
def _plain_static_storage(settings):
    # The manifest storage needs `collectstatic` first; tests render pages without it.
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    # The factories hash a password per user; PBKDF2 would spend a second per test on it.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def owner(db):
    """alice: a member of tenant acme who creates streams (so every ACE names her)."""
    return MembershipFactory(user__username="alice", tenant__name="acme", role=Role.MEMBER).user


@pytest.fixture
def member(owner):
    """bob: in acme too, but named in no ACE of alice's streams."""
    return MembershipFactory(user__username="bob", tenant=owner.memberships.get().tenant).user


@pytest.fixture
def outsider(db):
    """mallory: a member of another tenant, globex."""
    return MembershipFactory(user__username="mallory", tenant__name="globex").user


@pytest.fixture
def operator(db):
    return UserFactory(username="ops", is_staff=True)


@pytest.fixture
def sanfrancisco(db):
    return ClusterFactory(name="sanfrancisco")


@pytest.fixture
def newyork(db):
    return ClusterFactory(name="newyork")


@pytest.fixture
def activity(owner, sanfrancisco):
    """/mapr/sanfrancisco/activity, owned by alice."""
    return StreamFactory(cluster=sanfrancisco, name="activity", created_by=owner)


@pytest.fixture
def activity_ny(owner, newyork):
    """/mapr/newyork/activity, owned by alice."""
    return StreamFactory(cluster=newyork, name="activity", created_by=owner)


@pytest.fixture
def clicks(owner, activity, newyork):
    """activity:clicks with 3 partitions, both clusters' stores made first (as cluster_create
    does: the stores exist before any gateway runs)."""
    for cluster in (activity.cluster, newyork):
        store_for(cluster)
    return topic_create(actor=owner, stream=activity, name="clicks", partitions=3)


@pytest.fixture
def carol(owner):
    """carol: in acme with alice, administers her own streams only."""
    return MembershipFactory(user__username="carol", tenant=owner.memberships.get().tenant).user


@pytest.fixture
def mirror(carol, newyork):
    """/mapr/newyork/mirror, owned by carol (alice holds no permission on it)."""
    return StreamFactory(cluster=newyork, name="mirror", created_by=carol)


@pytest.fixture
def agreed(owner, activity, activity_ny):
    """activity -> activity_ny with both halves of the agreement: it replicates."""
    link = replica_add(actor=owner, source=activity, replica=activity_ny)
    upstream_add(actor=owner, replica=activity_ny, source=activity)
    return link


@pytest.fixture
def private_cache(settings, request):
    """A cache of the test's own (locmem, as the embedded mode uses) instead of the shared
    Redis: lag samples live in Django's cache keyed by link id, and test runs sharing one
    Redis would read each other's. Modules that read lag use it for every test."""
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache",
                                   "LOCATION": request.node.nodeid}}


def _api(user):
    client = APIClient()
    if user is not None:
        client.force_authenticate(user)
    return client


@pytest.fixture
def api():
    """api(user) -> an authenticated DRF test client (None for anonymous)."""
    return _api


@pytest.fixture(scope="session")
def spark():
    """One local Spark context for the whole run (its JVM takes seconds to start); jobs that
    run in this process (workers/jobs.py in local mode) get the same one."""
    from workers.spark import spark_context

    context = spark_context()
    yield context
    context.stop()

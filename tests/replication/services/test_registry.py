"""The registry's writes under concurrency: registrations under one subject at once each get
their own version (the tenant row's lock), and the same text at once gets one id."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

import pytest
from django.db import connection

from replication.models import RegisteredSchema, SubjectVersion
from replication.services.registry import Candidate, schema_register
from replication.services.registryreads import registry_access

pytestmark = pytest.mark.django_db(transaction=True)


def at_once(calls: list[Callable[[], object]]) -> list[object]:
    start, results = threading.Barrier(len(calls)), [None] * len(calls)

    def run(i: int) -> None:
        try:
            start.wait()
            results[i] = calls[i]()
        except BaseException as error:  # kept for the assertion in the test thread
            results[i] = error
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return results


def record(field: str) -> str:
    return json.dumps({"type": "record", "name": "R", "fields": [
        {"name": "a", "type": "int"}, {"name": field, "type": "int", "default": 0}]})


def test_registrations_at_once_number_their_versions_one_by_one(owner):
    access = registry_access(actor=owner)
    made = at_once([lambda f=f: schema_register(access=access, subject="s",
                                                candidate=Candidate("AVRO", record(f), None))
                    for f in ("b", "c", "d", "e")])
    assert all(isinstance(m, SubjectVersion) for m in made), made
    assert sorted(m.version for m in made) == [1, 2, 3, 4]


def test_the_same_text_at_once_gets_one_id(owner):
    access = registry_access(actor=owner)
    made = at_once([lambda s=s: schema_register(access=access, subject=s,
                                                candidate=Candidate("AVRO", record("b"), None))
                    for s in ("s1", "s2", "s3")])
    assert len({m.schema_id for m in made}) == 1, made
    assert RegisteredSchema.objects.count() == 1

"""`streamgate schema ...` against a live portal: -schema read from a file, a mistyped file
name refused before anything is sent, and the registry's refusals in maprcli's JSON error
form."""

from __future__ import annotations

import errno
import json

from replication.models import SubjectVersion
from tests.portal.registry.helpers import USER, USER_REQUIRED_AGE, USER_V2
from tests.streamgate.test_cli import rows, streamgate, token_for


def test_register_from_a_file_then_list_info_compatibility_and_delete(cli, owner, tmp_path):
    alice = token_for(owner)
    (tmp_path / "user.avsc").write_text(USER)
    (tmp_path / "user2.avsc").write_text(USER_V2)
    [made] = rows(cli(alice, f"schema register -subject users-value -schema "
                             f"{tmp_path / 'user.avsc'} -json"))
    assert (made["version"], made["type"]) == (1, "AVRO")
    [check] = rows(cli(alice, f"schema check -subject users-value -schema "
                              f"{tmp_path / 'user2.avsc'} -json"))
    assert check["compatible"] is True
    cli(alice, f"schema register -subject users-value -schema {tmp_path / 'user2.avsc'}")
    listed = cli(alice, "schema list").stdout.splitlines()
    assert listed[0].split()[:3] == ["subject", "versions", "latestversion"]
    assert listed[1].split()[:3] == ["users-value", "1;", "2"]
    [v1] = rows(cli(alice, "schema info -subject users-value -version 1 -json"))
    assert json.loads(v1["schema"]) == json.loads(USER)
    [level] = rows(cli(alice, "schema compatibility -subject users-value -level full -json"))
    assert level["compatibility"] == "FULL"
    cli(alice, "schema delete -subject users-value -version 2")
    assert list(SubjectVersion.objects.filter(deleted=False).values_list("version",
                                                                          flat=True)) == [1]


def test_schema_text_on_the_command_line_and_a_missing_file(live_server, owner):
    alice = token_for(owner)
    done = streamgate(live_server.url, alice, "schema register -subject s -schema "
                      "'{\"type\": \"string\"}' -json")
    assert done.returncode == 0, done.stderr
    missing = streamgate(live_server.url, alice, "schema register -subject s -schema nope.avsc")
    assert missing.returncode == 1
    assert "-schema nope.avsc: no such file; give a schema file or the schema text" \
        in missing.stderr
    assert SubjectVersion.objects.count() == 1


def test_an_incompatible_schema_answers_maprclis_error_and_registers_nothing(
        live_server, cli, owner):
    alice = token_for(owner)
    cli(alice, f"schema register -subject users-value -schema '{USER}'")
    done = streamgate(live_server.url, alice,
                      f"schema register -subject users-value -schema '{USER_REQUIRED_AGE}' -json")
    assert done.returncode == 1
    [error] = json.loads(done.stdout)["errors"]
    assert error["id"] == errno.EEXIST and "incompatible with an earlier schema" in error["desc"]
    assert SubjectVersion.objects.count() == 1

"""`streamgate user scram set|list|delete` against a live portal: a user's own SCRAM
passwords, anyone's for an operator, another user's refused in maprcli's JSON error form."""

from __future__ import annotations

import errno
import json

from scramp import ScramMechanism

from accounts.models import ScramCredential
from tests.streamgate.test_cli import rows, streamgate, token_for


def test_a_user_sets_lists_and_deletes_their_scram_passwords(cli, owner):
    alice = token_for(owner)
    [row] = rows(cli(alice, "user scram set -mechanism scram-sha-256 -password 's3cret' -json"))
    assert (row["user"], row["mechanism"], row["iterations"]) == ("alice", "SCRAM-SHA-256", 8192)
    cli(alice, "user scram set -mechanism SCRAM-SHA-512 -password other -iterations 4096")
    listed = cli(alice, "user scram list").stdout.splitlines()
    assert listed[0].split() == ["user", "mechanism", "iterations", "updated"]
    assert [line.split()[1:3] for line in listed[1:]] == [["SCRAM-SHA-256", "8192"],
                                                           ["SCRAM-SHA-512", "4096"]]
    assert "s3cret" not in " ".join(listed)
    # What was kept is the password's SCRAM keys: they check the password, nothing else.
    kept = ScramCredential.objects.get(mechanism="SCRAM-SHA-256")
    _, stored, server, _ = ScramMechanism("SCRAM-SHA-256").make_auth_info(
        "s3cret", iteration_count=8192, salt=bytes(kept.salt))
    assert (bytes(kept.stored_key), bytes(kept.server_key)) == (stored, server)
    cli(alice, "user scram delete -mechanism scram-sha-512")
    assert [r["mechanism"] for r in rows(cli(alice, "user scram list -json"))] == [
        "SCRAM-SHA-256"]


def test_another_users_scram_password_is_refused_in_maprcli_form(live_server, owner, member):
    bob = token_for(member)
    done = streamgate(live_server.url, bob, "user scram set -mechanism scram-sha-256 "
                                            "-password x -user alice -json")
    assert done.returncode == 1
    envelope = json.loads(done.stdout)
    assert envelope["status"] == "ERROR"
    [error] = envelope["errors"]
    assert error["id"] == errno.EPERM and "may manage only their own" in error["desc"]
    assert not ScramCredential.objects.exists()


def test_an_operator_manages_anyones_scram_password(cli, owner, operator):
    ops = token_for(operator)
    cli(ops, "user scram set -mechanism scram-sha-512 -password x -user alice")
    assert [r["user"] for r in rows(cli(ops, "user scram list -user alice -json"))] == ["alice"]
    cli(ops, "user scram delete -mechanism scram-sha-512 -user alice")
    assert not ScramCredential.objects.exists()


def test_out_of_range_iterations_and_missing_credentials_are_refused(live_server, owner):
    alice = token_for(owner)
    low = streamgate(live_server.url, alice,
                     "user scram set -mechanism scram-sha-256 -password x -iterations 1000")
    assert low.returncode == 1 and "out of range: give 4096 to 16384" in low.stderr + low.stdout
    gone = streamgate(live_server.url, alice, "user scram delete -mechanism scram-sha-256 -json")
    [error] = json.loads(gone.stdout)["errors"]
    assert gone.returncode == 1 and error["id"] == errno.ENOENT
    assert "has no SCRAM-SHA-256 credential" in error["desc"]

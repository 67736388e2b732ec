"""`streamgate user token create|list|revoke` against a live portal: the token made is shown
once and works, the list never shows a secret, a token cannot make a wider one, and another
user's token is refused in maprcli's JSON error form, unchanged."""

from __future__ import annotations

import errno
import json

from knox.models import AuthToken

from accounts.tokens import issue_token
from tests.streamgate.test_cli import rows, streamgate, token_for


def test_a_user_makes_lists_and_revokes_a_token(cli, owner):
    alice = token_for(owner)
    [made] = rows(cli(alice, "user token create -name deploy -scope produce -expires 30 -json"))
    assert (made["name"], made["scope"]) == ("deploy", "produce") and made["expiry"] > 0
    listed = cli(made["token"], "user token list").stdout
    assert "deploy" in listed and made["token"] not in listed
    assert listed.splitlines()[0].split() == ["id", "name", "scope", "created", "expiry",
                                              "lastused"]
    cli(alice, f"user token revoke -id {made['id']}")
    assert [r["name"] for r in rows(cli(alice, "user token list -json"))] == [""]  # alice's own
    assert not AuthToken.objects.filter(digest__startswith=made["id"]).exists()


def test_a_read_token_cannot_make_an_admin_one(live_server, owner):
    _, read = issue_token(owner, name="r", scope="read")
    done = streamgate(live_server.url, read, "user token create -name w -scope admin -json")
    assert done.returncode == 1
    [error] = json.loads(done.stdout)["errors"]
    assert error["id"] == errno.EPERM and "needs the admin scope" in error["desc"]
    assert AuthToken.objects.count() == 1


def test_bad_input_and_another_users_token_are_refused(live_server, owner, outsider):
    theirs, _ = issue_token(outsider, name="theirs")
    alice = token_for(owner)
    bad = streamgate(live_server.url, alice, "user token create -name x -expires soon")
    assert bad.returncode == 1 and "is not a number of days" in bad.stderr
    gone = streamgate(live_server.url, alice, f"user token revoke -id {theirs.digest[:16]} -json")
    assert gone.returncode == 1
    [error] = json.loads(gone.stdout)["errors"]
    assert error["id"] == errno.ENOENT and "no token" in error["desc"]
    assert AuthToken.objects.filter(user=outsider).count() == 1
    assert AuthToken.objects.filter(user=owner).count() == 1

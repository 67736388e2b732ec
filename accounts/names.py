"""What a user or group may be called. ACEs name accounts (`u:<name>`, `g:<name>`), so the ACE
language (replication/ace.py) reads names with these characters and account creation refuses
any other: an account no ACE could spell could never be granted anything."""

from __future__ import annotations

import string

# ASCII only: these are the characters POSIX user/group names, numeric ids, Kerberos-style
# `user@REALM` names and Windows-style `name$` accounts use; anything else is rejected.
NAME_CHARS = frozenset(string.ascii_letters + string.digits + "_-.@$")
NAME_HINT = "names may use only letters, digits and _ - . @ $"

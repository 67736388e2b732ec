"""Private data files: what the product writes under STREAMGATE_DATA_DIR is its owner's alone.

The control database holds session keys, password hashes and token digests, the store files
every tenant's messages: another local user who could read them could take over any session.
One mechanism covers every writer: a umask of 0o077, set by the settings module, which every
process of the product imports before it creates a file (manage.py and its commands, the ASGI
and WSGI apps, Celery, the gateway, replicator and Kafka listener), so new files are 0600 and
new folders 0700, SQLite's -wal, -shm and -journal files included (SQLite gives them the mode
of their database) and whatever child processes (Spark's JVM) inherit it. Files written by an
older release keep their mode, so start-up also narrows the ones the product writes.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

PRIVATE_UMASK = 0o077
FILE_MODE = 0o600
FOLDER_MODE = 0o700
# Collected static files are public (the pages link them): they are left as they are.
PUBLIC = {"static"}


def restrict_new_files() -> None:
    os.umask(PRIVATE_UMASK)


def make_private(data_dir: Path) -> None:
    """Narrow the data folder, what it holds and the files of its folders (stores/) to the
    owner, but for the public static files. A folder at 0700 already hides what lies deeper."""
    if not data_dir.is_dir():
        return
    _narrow(data_dir)
    for entry in data_dir.iterdir():
        if entry.name in PUBLIC:
            continue
        _narrow(entry)
        if entry.is_dir() and not entry.is_symlink():
            for inner in entry.iterdir():
                _narrow(inner)


def _narrow(path: Path) -> None:
    try:
        if path.is_symlink():
            return  # what a link points at is someone else's to choose
        info = path.stat()
        # Another user's file, or a shared folder such as /tmp (sticky), is left alone.
        if info.st_uid != os.geteuid() or info.st_mode & stat.S_ISVTX:
            return
        mode = FOLDER_MODE if path.is_dir() else FILE_MODE
        current = stat.S_IMODE(info.st_mode)
        if current & ~mode:
            path.chmod(current & mode)
    except OSError:
        pass  # removed meanwhile (a SQLite journal), or not ours: nothing to narrow

"""What the product writes under STREAMGATE_DATA_DIR is its owner's alone (issue 27, item 5):
files 0600, folders 0700, SQLite's -wal and -shm included, whatever umask it was started with;
a data folder an older release left readable is narrowed at start-up."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Opens a cluster's message store the way the embedded product does, writes to it and, while
# its connection is open (so SQLite's -wal and -shm exist), lists every mode under the folder.
LIST_MODES = """
import os, stat
from django.conf import settings
from replication.models import Cluster
from replication.stores import store_for
store_for(Cluster(name="sanfrancisco"))
for folder, names, files in os.walk(settings.DATA_DIR):
    if os.path.relpath(folder, settings.DATA_DIR).split(os.sep)[0] == "static":
        continue
    for name in names + files:
        path = os.path.join(folder, name)
        mode = oct(stat.S_IMODE(os.stat(path).st_mode))
        print("mode", mode, os.path.relpath(path, settings.DATA_DIR))
"""


def embedded(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """manage.py on the embedded default, started with the usual umask of 022."""
    # No SECRET_KEY either: the embedded default writes its own (var/secret_key).
    env = {k: v for k, v in os.environ.items()
           if k not in {"DATABASE_URL", "REDIS_URL", "SECRET_KEY"}}
    env.update(STREAMGATE_DATA_DIR=str(data_dir), DJANGO_SETTINGS_MODULE="portal.settings")
    result = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=300,
                            preexec_fn=lambda: os.umask(0o022))
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def modes(listing: str) -> dict[str, int]:
    rows = [line.split(" ", 2) for line in listing.splitlines() if line.startswith("mode ")]
    return {path: int(mode, 8) for _, mode, path in rows}


def test_the_embedded_start_up_writes_private_files_and_folders(tmp_path):
    data = tmp_path / "var"
    embedded(data, "migrate", "--no-input")
    found = modes(embedded(data, "shell", "-c", LIST_MODES).stdout)

    expected = {"secret_key", "control.sqlite3", "stores", "stores/sanfrancisco.sqlite3",
                "stores/sanfrancisco.sqlite3-wal", "stores/sanfrancisco.sqlite3-shm"}
    assert expected <= set(found), found
    for path, mode in found.items():
        wanted = 0o700 if (data / path).is_dir() else 0o600
        assert mode == wanted, f"{path} is {oct(mode)}, not {oct(wanted)}"
    assert stat.S_IMODE(data.stat().st_mode) == 0o700


def test_start_up_narrows_the_files_an_older_release_left_readable(tmp_path):
    data = tmp_path / "var"
    (data / "stores").mkdir(parents=True)
    for name in ("control.sqlite3", "secret_key", "stores/sanfrancisco.sqlite3"):
        (data / name).write_text("")
        (data / name).chmod(0o644)
    for folder in (data, data / "stores"):
        folder.chmod(0o755)

    embedded(data, "check")

    for name in ("control.sqlite3", "secret_key", "stores/sanfrancisco.sqlite3"):
        assert stat.S_IMODE((data / name).stat().st_mode) == 0o600, name
    for folder in (data, data / "stores"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder

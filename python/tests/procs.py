"""What the tests look for after a farm ends: this user's gpfarm segments and a process's
gpfarmd children."""

import os
from pathlib import Path


def segments():
    """This user's gpfarm shared-memory segments: files in its directories of segments
    (`/dev/shm/gpfarm-<uid>`, or `gpfarm-<uid>-x<hex>` where that name was taken)."""
    uid = os.getuid()
    found = []
    for d in Path("/dev/shm").glob(f"gpfarm-{uid}*"):
        if d.is_dir() and not d.is_symlink() and d.stat().st_uid == uid:
            found.extend(p.name for p in d.glob(f"gpfarm-{uid}-*"))
    return sorted(found)


def gpfarmd_children(pid):
    """The gpfarmd processes whose parent is `pid` (zombies left out)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            name = (stat.parent / "comm").read_text().strip()
        except OSError:
            continue
        if name == "gpfarmd" and int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found

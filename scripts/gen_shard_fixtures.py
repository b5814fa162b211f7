#!/usr/bin/env python3
"""Writes the tar fixtures of tests/test_shards.c with Python's tarfile (an implementation
independent of bt's reader): the same members in the three header conventions bt reads.

    python3 scripts/gen_shard_fixtures.py   # writes tests/fixtures/data/shards/*.tar

Members (in this order): 'a/s1.txt', 'a/s1.json', a directory 'a/sub', a symlink 'a/link',
a 150-byte path '<long>/s2.txt' (ustar: split into prefix/name; GNU: a 'L' record; pax: a
'path' record), and an empty 's3.txt'. Each regular member's data is b'data:' + its name.
mtime 0, uid/gid 0, so the files are reproducible.
"""
import io
import os
import tarfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures",
                    "data", "shards")
LONG = "d" * 60 + "/" + "e" * 79 + "/s2.txt"  # 147 bytes, prefix/name splittable


def add(t, name, kind="file"):
    ti = tarfile.TarInfo(name)
    ti.mtime = 0
    ti.mode = 0o644
    if kind == "dir":
        ti.type = tarfile.DIRTYPE
        t.addfile(ti)
    elif kind == "link":
        ti.type = tarfile.SYMTYPE
        ti.linkname = "s1.txt"
        t.addfile(ti)
    else:
        data = b"" if name == "s3.txt" else b"data:" + name.encode()
        ti.size = len(data)
        t.addfile(ti, io.BytesIO(data))


def main():
    os.makedirs(ROOT, exist_ok=True)
    for fmt, name in ((tarfile.USTAR_FORMAT, "ustar"), (tarfile.GNU_FORMAT, "gnu"),
                      (tarfile.PAX_FORMAT, "pax")):
        with tarfile.open(os.path.join(ROOT, name + ".tar"), "w", format=fmt) as t:
            add(t, "a/s1.txt")
            add(t, "a/s1.json")
            add(t, "a/sub", "dir")
            add(t, "a/link", "link")
            add(t, LONG)
            add(t, "s3.txt")


if __name__ == "__main__":
    main()

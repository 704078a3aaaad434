#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Writes a folder as a gzip-compressed initramfs (the kernel's "newc" cpio format), for
tests/arm64/run_vm.sh; the cpio tool is not needed for so little.

usage: mkinitrd.py OUT.cpio.gz FOLDER
"""
import gzip
import os
import stat
import sys

CPIO_ALIGN = 4  # newc pads each header+name and each body to 4 bytes


def pad(n):
    return b"\0" * (-n % CPIO_ALIGN)


def entry(out, ino, name, mode, data):
    fields = (ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(name) + 1, 0)
    hdr = ("070701" + "".join("%08X" % v for v in fields)).encode() + name.encode() + b"\0"
    out.write(hdr + pad(len(hdr)) + data + pad(len(data)))


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: mkinitrd.py OUT.cpio.gz FOLDER")
    out_path, root = sys.argv[1], sys.argv[2]
    paths = []
    for d, dirs, files in os.walk(root):
        paths += [os.path.join(d, n) for n in sorted(dirs) + sorted(files)]
    with gzip.open(out_path, "wb") as out:
        for ino, p in enumerate(paths, 1):
            st = os.lstat(p)
            data = b""
            if stat.S_ISLNK(st.st_mode):
                data = os.readlink(p).encode()
            elif stat.S_ISREG(st.st_mode):
                with open(p, "rb") as f:
                    data = f.read()
            entry(out, ino, os.path.relpath(p, root), st.st_mode, data)
        entry(out, 0, "TRAILER!!!", 0, b"")


if __name__ == "__main__":
    main()

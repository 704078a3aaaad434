#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Writes the raw BTF of a kernel image (a vmlinuz that is not ELF: arm64's Image, raw or
gzip-compressed) to a file, for `bpftool btf dump file ... format c`.

Such an image carries its BTF as the bytes of section .BTF, with no section table to find them
by: the blob is found by its header (the kernel's struct btf_header: magic 0xeB9F, version 1,
flags, then hdr_len, type_off, type_len, str_off, str_len, the offsets counted from the
header's end). A candidate is believed only when its header is self-consistent, its
string section starts and ends with a NUL, and it is the largest such blob: kernel modules'
split BTF is not in the image, and a stray magic in code or data fails these checks.

usage: btf-extract.py IMAGE OUT
"""
import gzip
import struct
import sys

BTF_MAGIC = b"\x9f\xeb\x01"  # 0xeB9F little-endian, then version 1
BTF_HDR = struct.Struct("<HBBIIIII")
# The vmlinux BTF of any configured kernel is megabytes; a smaller blob is not the kernel's.
MIN_VMLINUX_BTF = 1 << 20


def candidates(img):
    pos = img.find(BTF_MAGIC)
    while pos >= 0:
        if pos + BTF_HDR.size <= len(img):
            _, _, _, hdr_len, type_off, type_len, str_off, str_len = BTF_HDR.unpack_from(
                img, pos)
            body = pos + hdr_len
            end = body + max(type_off + type_len, str_off + str_len)
            if (hdr_len >= BTF_HDR.size and hdr_len < 256 and type_len and str_len and
                    type_off + type_len <= str_off and end <= len(img) and
                    img[body + str_off] == 0 and img[body + str_off + str_len - 1] == 0):
                yield pos, end
        pos = img.find(BTF_MAGIC, pos + 1)


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: btf-extract.py IMAGE OUT")
    with open(sys.argv[1], "rb") as f:
        img = f.read()
    if img[:2] == b"\x1f\x8b":
        img = gzip.decompress(img)
    best = max(candidates(img), key=lambda c: c[1] - c[0], default=None)
    if not best or best[1] - best[0] < MIN_VMLINUX_BTF:
        sys.exit(f"btf-extract.py: no vmlinux BTF in {sys.argv[1]} (kernel built without "
                 "CONFIG_DEBUG_INFO_BTF?)")
    with open(sys.argv[2], "wb") as f:
        f.write(img[best[0]:best[1]])
    print(f"btf-extract.py: {best[1] - best[0]} bytes of BTF at offset {best[0]:#x}",
          file=sys.stderr)


if __name__ == "__main__":
    main()

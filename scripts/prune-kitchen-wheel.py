#!/usr/bin/env python3
"""Shrink a comfy-kitchen wheel for one GPU architecture so it fits a device call.

The PyPI wheel's CUDA extension is a fat binary (sm_75/80/89/90a/100/120 SASS + PTX,
~170 MB unpacked, 56 MB zipped); a device call carries 64 MiB in all. This keeps the
ELF (SASS) entries of the architectures named (default 90 = Hopper, i.e. the sm_90a
cubins) and overwrites every other entry's payload with zeros, leaving every header,
offset and size unchanged, so the CUDA runtime still parses the container and picks
the kept cubin; the zeros then compress away. Nothing else in the wheel changes
except the extension's line in RECORD (new hash).

    python3 scripts/prune-kitchen-wheel.py IN.whl OUT_DIR [--keep-arch 90 ...]

Standard library only. Fails (exit 1) if the container is not the expected layout.
"""
import argparse
import base64
import hashlib
import os
import struct
import sys
import zipfile

FATBIN_MAGIC = 0xBA55ED50
KIND_ELF = 2


def sections(data):
    if data[:4] != b"\x7fELF" or data[4] != 2:
        raise ValueError("not a 64-bit ELF file")
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    out = []
    for i in range(shnum):
        name, _typ, _flags, _addr, off, size = struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize)
        out.append((name, off, size))
    stroff = out[shstrndx][1]

    def name_of(n):
        return data[stroff + n:data.index(b"\0", stroff + n)].decode()

    return {name_of(n): (off, size) for n, off, size in out}


def prune(data, keep_arch):
    """Zero payloads of fatbin entries that are not ELF for an arch in keep_arch."""
    buf = bytearray(data)
    secs = sections(data)
    if ".nv_fatbin" not in secs:
        raise ValueError("no .nv_fatbin section")
    off, size = secs[".nv_fatbin"]
    end = off + size
    kept = zeroed = blobs = 0
    p = off
    while p + 16 <= end:
        magic, _ver, hsz, fsz = struct.unpack_from("<IHHQ", buf, p)
        if magic != FATBIN_MAGIC:
            p += 8  # blobs are 8-byte aligned, padding between them
            continue
        blobs += 1
        q, qe = p + hsz, p + hsz + fsz
        if qe > end:
            raise ValueError(f"fatbin blob at {p:#x} runs past the section")
        while q < qe:
            kind, _u, ehs, esize = struct.unpack_from("<HHIQ", buf, q)
            arch = struct.unpack_from("<I", buf, q + 28)[0]
            if ehs < 32 or q + ehs + esize > qe:
                raise ValueError(f"bad fatbin entry at {q:#x}")
            if kind == KIND_ELF and arch in keep_arch:
                kept += esize
            else:
                buf[q + ehs:q + ehs + esize] = bytes(esize)
                zeroed += esize
            q += ehs + esize
        p = qe
    if kept == 0:
        raise ValueError(f"no ELF entry for arch {sorted(keep_arch)}: nothing would run")
    return bytes(buf), blobs, kept, zeroed


def record_hash(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("wheel")
    ap.add_argument("out_dir")
    ap.add_argument("--keep-arch", type=int, action="append", help="SASS arch to keep (default 90)")
    a = ap.parse_args()
    keep = set(a.keep_arch or [90])
    os.makedirs(a.out_dir, exist_ok=True)
    out_path = os.path.join(a.out_dir, os.path.basename(a.wheel))
    if os.path.abspath(out_path) == os.path.abspath(a.wheel):
        sys.exit("refusing to overwrite the input wheel; pick another OUT_DIR")
    new_files = {}
    with zipfile.ZipFile(a.wheel) as zin:
        names = zin.namelist()
        for n in names:
            if n.endswith(".so") and "backends/cuda/" in n:
                pruned, blobs, kept, zeroed = prune(zin.read(n), keep)
                new_files[n] = pruned
                print(f"{n}: {blobs} fatbin blobs, kept {kept / 1e6:.1f} MB of arch {sorted(keep)}, "
                      f"zeroed {zeroed / 1e6:.1f} MB")
        if not new_files:
            sys.exit("no CUDA extension in this wheel")
        record = next(n for n in names if n.endswith(".dist-info/RECORD"))
        lines = []
        for line in zin.read(record).decode().splitlines():
            path = line.split(",")[0]
            if path in new_files:
                line = f"{path},{record_hash(new_files[path])},{len(new_files[path])}"
            lines.append(line)
        new_files[record] = ("\n".join(lines) + "\n").encode()
        with zipfile.ZipFile(out_path, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zout:
            for info in zin.infolist():
                data = new_files.get(info.filename)
                if data is None:
                    data = zin.read(info.filename)
                zout.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED, compresslevel=9)
    print(f"wrote {out_path} ({os.path.getsize(out_path) / 2**20:.1f} MiB)")


if __name__ == "__main__":
    main()

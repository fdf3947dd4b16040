"""Fail for a wheel whose extension needs a C library function with no symbol version.

auditwheel judges a wheel by the versioned symbols it needs (``preadv2@GLIBC_2.26``). A
function the linker's glibc 2.17 stubs lack (zig links against them) is left undefined with
no version at all, so auditwheel does not see it, and the wheel then fails to import on a
system whose C library lacks it. Every strong undefined symbol must carry a version, except
the Python API the interpreter itself provides; weak ones (Rust's std probes for
``statx``, ``getrandom``...) may be missing at run time.

Usage: python packaging/unversioned_symbols.py WHEEL...  (needs pyelftools: auditwheel's)
"""

from __future__ import annotations

import io
import sys
import zipfile

from elftools.elf.elffile import ELFFile

# The interpreter's own API (CPython and PyPy), resolved from the process, never from libc.
PYTHON_PREFIXES = ("Py", "_Py")


def unversioned(data: bytes) -> list[str]:
    elf = ELFFile(io.BytesIO(data))
    dynsym = elf.get_section_by_name(".dynsym")
    versym = elf.get_section_by_name(".gnu.version")
    if dynsym is None:
        return []
    found = []
    for index, sym in enumerate(dynsym.iter_symbols()):
        if not sym.name or sym["st_shndx"] != "SHN_UNDEF":
            continue
        if sym["st_info"]["bind"] != "STB_GLOBAL" or sym.name.startswith(PYTHON_PREFIXES):
            continue
        ndx = versym.get_symbol(index).entry["ndx"] if versym is not None else "VER_NDX_GLOBAL"
        if ndx in ("VER_NDX_LOCAL", "VER_NDX_GLOBAL"):
            found.append(sym.name)
    return found


def main(wheels: list[str]) -> int:
    bad = 0
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as zf:
            for name in zf.namelist():
                if not name.endswith(".so"):
                    continue
                names = unversioned(zf.read(name))
                if names:
                    bad += 1
                    print(f"FAIL: {wheel}: {name} needs unversioned {', '.join(sorted(names))}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

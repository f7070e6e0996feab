#!/usr/bin/env python3
"""Is the machine code of two kernel files the same? Compiles each .cu file to a cubin, no GPU needed.

A rung that is rewritten (moved into one file, renamed, its flags removed) is the kernel that was
measured only if ptxas emits the same instructions for it. This script answers that without a GPU:
it compiles each file with the build's own flags (from build/compile_commands.json) to a cubin for
one architecture, reads every kernel's .text section out of the ELF file and compares them.

Kernels are matched by their instructions, not their names (a rung's name is in its mangled
kernel name). The verdict lists each kernel of A with the kernel of B that has byte-identical
code, or "no match". Exit status 0 when every kernel of A has its twin in B (and B has no extra
kernel unless --subset), 1 otherwise.

    python3 bench/sass_identical.py chapters/05_flash_forward/v4_swizzled_pipelined.cu \\
        old/chapters/05_flash_forward/v9_pipelined_fragment_loads.cu [--arch sm_90] [--build build]

(a file outside the build, such as one of an older checkout, is compiled with the flags of a CUDA
file of the build and its own folder first on the include path).

--subset: B may hold more kernels than A (A's kernels are a subset of B's).
--list FILE: print FILE's kernels (size, hash, name) and stop.
"""
import argparse
import hashlib
import json
import os
import shlex
import struct
import subprocess
import sys
import tempfile


def compile_command(build, source):
    """The build's nvcc command for `source`, changed to write a cubin for one architecture."""
    db = json.load(open(os.path.join(build, "compile_commands.json")))
    source = os.path.realpath(source)
    for entry in db:
        if os.path.realpath(entry["file"]) == source:
            return shlex.split(entry["command"]), entry["directory"]
    # A file the build does not know yet (a new rung before cmake re-ran): borrow a neighbour's
    # flags from the same folder.
    folder = os.path.dirname(source)
    for entry in db:
        if os.path.dirname(os.path.realpath(entry["file"])) == folder and entry["file"].endswith(".cu"):
            args = shlex.split(entry["command"])
            return [source if os.path.realpath(a) == os.path.realpath(entry["file"]) else a
                    for a in args], entry["directory"]
    # A file of another tree (an older checkout kept for comparison): the flags of any CUDA file
    # of this build, with the file's own folder first on the include path.
    for entry in db:
        if entry["file"].endswith(".cu"):
            args = shlex.split(entry["command"])
            args = [source if os.path.realpath(a) == os.path.realpath(entry["file"]) else a
                    for a in args]
            return [args[0], f"-I{folder}"] + args[1:], entry["directory"]
    sys.exit(f"{source}: not in {build}/compile_commands.json (run cmake first)")


def cubin(build, source, arch):
    args, directory = compile_command(build, source)
    out = tempfile.NamedTemporaryFile(suffix=".cubin", delete=False).name
    keep, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a in ("-o", "-c"):
            skip = a == "-o"
            continue
        if a.startswith("--generate-code") or a.startswith("-gencode") or a.startswith("-arch"):
            continue
        keep.append(a)
    keep += ["-cubin", f"-arch={arch}", "-o", out]
    subprocess.run(keep, cwd=directory, check=True)
    return out


def text_sections(path):
    """{kernel name: bytes of its .text section} from an ELF64 cubin."""
    data = open(path, "rb").read()
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names_off = headers[shstrndx][4]

    def name(offset):
        end = data.index(b"\0", names_off + offset)
        return data[names_off + offset:end].decode()

    out = {}
    for h in headers:
        n = name(h[0])
        if n.startswith(".text."):
            out[n[len(".text."):]] = data[h[4]:h[4] + h[5]]
    return out


def demangle(names):
    try:
        res = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True)
        return dict(zip(names, res.stdout.splitlines()))
    except OSError:
        return {n: n for n in names}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("a")
    ap.add_argument("b", nargs="?")
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--build", default="build")
    ap.add_argument("--subset", action="store_true")
    ap.add_argument("--list", action="store_true")
    opt = ap.parse_args()

    a = text_sections(cubin(opt.build, opt.a, opt.arch))
    names = demangle(list(a))
    if opt.list or opt.b is None:
        for k, code in sorted(a.items(), key=lambda kv: names[kv[0]]):
            print(f"{len(code):8d} {hashlib.sha1(code).hexdigest()[:12]} {names[k][:160]}")
        return 0
    b = text_sections(cubin(opt.build, opt.b, opt.arch))
    names.update(demangle(list(b)))
    by_code = {}
    for k, code in b.items():
        by_code.setdefault(code, []).append(k)
    ok = True
    matched = set()
    for k, code in sorted(a.items(), key=lambda kv: names[kv[0]]):
        twins = by_code.get(code, [])
        if twins:
            matched.update(twins)
            print(f"same      {len(code):8d} B  {names[k][:110]}")
        else:
            ok = False
            print(f"NO MATCH  {len(code):8d} B  {names[k][:110]}")
    extra = [k for k in b if k not in matched]
    for k in extra:
        print(f"only in B {len(b[k]):8d} B  {names[k][:110]}")
    if extra and not opt.subset:
        ok = False
    print(f"{opt.arch}: {len(a)} kernels in A, {len(b)} in B: "
          + ("machine code identical" if ok else "DIFFERENT"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

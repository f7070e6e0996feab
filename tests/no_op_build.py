#!/usr/bin/env python3
"""A second build with nothing changed must do nothing: every file ninja's records name exists.

    python3 tests/no_op_build.py BUILD_DIR [NINJA]

ninja keeps, for each object it built, the files the compiler said it read (the depfile, stored in
BUILD_DIR/.ninja_deps; `ninja -t deps` lists them). On the next build a listed file that does not
exist makes the object dirty: ninja finds no rule to make it, so it recompiles the object and
relinks everything after it, on every build, for ever. That happened with the generated mutants of
tests/mutants/CMakeLists.txt: their `#line 1 "chapters/..."` named the rung relative to the source
folder, nvcc wrote that name into the depfile, and ninja looked for it in the build folder.

This asks ninja for the list (reading only, so it can run beside the other tests after a build)
and fails, naming each object and file, when a listed file is missing. A dry run (`ninja -n`)
cannot answer the question: with CMake's CONFIGURE_DEPENDS globs it stops at "Re-running CMake".
CI also builds twice and checks that the second build says "no work to do" (.ci/run).
Exit 0: every file exists. 1: some are missing. 77 (skipped): not a ninja build, or nothing built.
"""
import os
import subprocess
import sys


def recorded_deps(build, ninja):
    """{object: [files it depends on]} from `ninja -t deps`."""
    out = subprocess.run([ninja, "-C", build, "-t", "deps"], capture_output=True, text=True,
                         check=True).stdout
    deps, current = {}, None
    for line in out.splitlines():
        if not line.strip():
            current = None
        elif not line.startswith(" "):
            current = line.split(":")[0]  # "obj.o: #deps 12, deps mtime 123 (VALID)"
            deps[current] = []
        elif current is not None:
            deps[current].append(line.strip())
    return deps


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    build = os.path.abspath(argv[1])
    ninja = argv[2] if len(argv) > 2 else "ninja"
    if not os.path.exists(os.path.join(build, "build.ninja")):
        print("%s: not a ninja build (no build.ninja): nothing to check" % build)
        return 77
    deps = recorded_deps(build, ninja)
    if not deps:
        print("%s: ninja has recorded no dependencies yet (nothing built): nothing to check" % build)
        return 77
    missing = [(obj, f) for obj, files in sorted(deps.items()) for f in files
               if not os.path.exists(os.path.join(build, f))]
    for obj, f in missing:
        print("%s depends on %s, which does not exist (seen from %s): ninja rebuilds it on "
              "every build" % (obj, f, build))
    print("%d objects, %d recorded dependencies, %d missing"
          % (len(deps), sum(len(v) for v in deps.values()), len(missing)))
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""The layering, checked against the build itself: every source file of a layer is compiled
with the include directories of that layer and the layers below it only (read from
compile_commands.json), and every quoted #include in it names a header that one of those
layers holds. A backwards include therefore cannot compile, and a meson.build that widens
a layer's include path fails here.

A quoted #include names its header alone ("error.hpp"), never with a path
("../support/error.hpp", "support/error.hpp"): a path resolves against the including file's
folder or the source root, not the layers' include directories, so it would get past both
the include directories and the check above. Every file under src/ (headers too) and every
other source checked above is held to this; the only exception is PATH_EXCEPTIONS."""
import json
import os
import re
import sys

# Layer -> the layers (source folders) whose headers it may include.
ALLOWED = {
    "src/support": {"src/support"},
    "src/transport": {"src/transport", "src/support"},
    "src/providers/ofi": {"src/providers/ofi", "src/transport", "src/support"},
    "src/providers/ucx": {"src/providers/ucx", "src/transport", "src/support"},
    "src/providers/inproc": {"src/providers/inproc", "src/transport", "src/support"},
    "src/providers/fault": {"src/providers/fault", "src/transport", "src/support"},
    "src/providers/routed": {"src/providers/routed", "src/transport", "src/support"},
    "src/providers": {"src/providers", "src/providers/ofi", "src/providers/ucx", "src/providers/inproc",
                      "src/providers/fault", "src/providers/routed",
                      "src/transport", "src/support"},
    "src/bootstrap": {"src/bootstrap", "src/support"},
    "src/collectives": {"src/collectives", "src/transport", "src/bootstrap", "src/support", "include"},
    "src/api": {"src/api", "src/collectives", "src/providers", "src/providers/ofi", "src/providers/ucx",
                "src/providers/inproc", "src/providers/fault", "src/providers/routed", "src/transport",
                "src/bootstrap", "src/support", "include"},
    "src/bootstrap/mpi": {"src/bootstrap/mpi", "include"},
    # The perf tools that measure what users get use the public API only, as an
    # application would (pcoll_pingpong measures the transport below it and is not listed).
    "perf/pcoll_allreduce.cpp": {"include"},
    "perf/pcoll_imbalance.cpp": {"include"},
    "perf/perf_job.cpp": {"include"},
    "perf/perf_args.cpp": {"include"},
    "perf/imbalance_model.cpp": {"include"},
    # The fuzz targets (tests/fuzz, built only with -Dfuzz=true; scripts/fuzz.sh runs this
    # check on its build) see the layer whose parser they fuzz and what that layer sees.
    "tests/fuzz/fuzz_settings.cpp": {"src/support"},
    "tests/fuzz/fuzz_store_wire.cpp": {"src/bootstrap", "src/support"},
    "tests/fuzz/fuzz_ofi_key.cpp": {"src/providers/ofi", "src/support"},
    "tests/fuzz/fuzz_ucx_key.cpp": {"src/providers/ucx", "src/support"},
    "tests/fuzz/fuzz_notification.cpp": {"src/collectives", "src/transport", "src/bootstrap", "src/support",
                                         "include"},
}

# Quoted includes that may carry a path: the public headers, which live in include/pcoll/ and
# are included as "pcoll/<header>" through include/ (the layers allowed "include" above).
PATH_EXCEPTIONS = re.compile(r"pcoll/[^/]+")

INCLUDE = re.compile(r'\s*#\s*include\s*"([^"]+)"')


def quoted_includes(path):
    """(line number, name) of every quoted #include in the file."""
    with open(path, errors="replace") as f:
        for number, line in enumerate(f, 1):
            m = INCLUDE.match(line)
            if m:
                yield number, m.group(1)


def path_error(path, source_root, number, name):
    """The message for a quoted include with a path in it, or None."""
    if "/" not in name and ".." not in name:
        return None
    if PATH_EXCEPTIONS.fullmatch(name) and ".." not in name:
        return None
    return (f'{os.path.relpath(path, source_root)}:{number} includes "{name}" with a path: name the '
            f"header alone, found through its layer's include directory")


def layer_of(path, source_root):
    rel = os.path.relpath(path, source_root)
    best = None
    for layer in ALLOWED:
        if rel == layer or rel.startswith(layer + "/"):
            if best is None or len(layer) > len(best):
                best = layer
    return best


def main():
    build_dir, source_root = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    with open(os.path.join(build_dir, "compile_commands.json")) as f:
        commands = json.load(f)
    headers = {}  # header file name -> layer folder
    for layer in ALLOWED:
        folder = os.path.join(source_root, layer)
        if not os.path.isdir(folder):
            continue  # a single file held to a layer's rules
        for name in os.listdir(folder):
            if name.endswith((".hpp", ".h")):
                headers[name] = layer
    errors = []
    checked = 0
    scanned = set()  # sources whose includes were read
    for entry in commands:
        source = os.path.normpath(os.path.join(entry["directory"], entry["file"]))
        layer = layer_of(source, source_root)
        if layer is None:
            continue
        checked += 1
        allowed = ALLOWED[layer]
        for flag in re.findall(r"-I(\S+)", entry["command"]):
            inc = os.path.normpath(os.path.join(entry["directory"], flag))
            for root in (source_root, build_dir):
                rel = os.path.relpath(inc, root)
                if rel.startswith("src") or rel == "include":
                    if rel not in allowed and not rel.endswith(".p"):
                        errors.append(f"{os.path.relpath(source, source_root)} ({layer}) is compiled with -I{rel}")
        scanned.add(source)
        for number, name in quoted_includes(source):
            error = path_error(source, source_root, number, name)
            if error is not None:
                errors.append(error)
                continue
            owner = "include" if name.startswith("pcoll/") else headers.get(name)
            if owner is not None and owner not in allowed:
                errors.append(f"{os.path.relpath(source, source_root)}:{number} ({layer}) includes {name} of {owner}")
    # Headers, and sources this build does not compile (a disabled provider or bootstrap):
    # no path in their quoted includes either.
    for folder, _, names in os.walk(os.path.join(source_root, "src")):
        for file_name in sorted(names):
            path = os.path.join(folder, file_name)
            if not file_name.endswith((".cpp", ".hpp", ".h", ".c")) or path in scanned:
                continue
            for number, name in quoted_includes(path):
                error = path_error(path, source_root, number, name)
                if error is not None:
                    errors.append(error)
    if checked < 20:
        errors.append(f"only {checked} layer sources found in compile_commands.json: is this the right build?")
    for e in errors:
        print("layering:", e)
    print(f"layering: {checked} sources checked, {len(errors)} violations")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

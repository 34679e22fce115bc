#!/usr/bin/python3
"""Prints the ninja targets that a selection of a build's tests needs, one per line, so that
an extra build (sanitizers, ThreadSanitizer) compiles only what its suites run:

    ninja -C B $(scripts/test-targets.py B --suite unit --no-suite ucx 'a test name')
    meson test -C B --no-rebuild --suite unit --no-suite ucx 'a test name'

Selection as meson test makes it: a test is chosen when it is named, or when no name is
given and it is in one of the --suite suites (every suite when none is given), and it is in
none of the --no-suite suites. A suite matches a test's "project:suite+other" label part by
part. A test needs the targets it depends on and every built file its command line or
environment names."""
import argparse
import json
import os
import subprocess
import sys


def introspect(build, what):
    out = subprocess.run(["meson", "introspect", build, what], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def suites_of(test):
    parts = set()
    for label in test["suite"]:
        parts.update(label.split(":", 1)[-1].split("+"))
        parts.add(label.split(":", 1)[-1])
    return parts


def chosen(test, names, suites, no_suites):
    labels = suites_of(test)
    if labels & no_suites:
        return False
    if names:
        return test["name"] in names
    return not suites or bool(labels & suites)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("build")
    parser.add_argument("--suite", action="append", default=[])
    parser.add_argument("--no-suite", action="append", default=[])
    parser.add_argument("--setup", help="accepted and ignored: setups do not change what is built")
    parser.add_argument("names", nargs="*")
    args = parser.parse_args()
    build = os.path.abspath(args.build)
    targets = introspect(build, "--targets")
    by_id = {t["id"]: t for t in targets}
    by_file = {f: t for t in targets for f in t["filename"]}
    tests = [t for t in introspect(build, "--tests") if chosen(t, set(args.names), set(args.suite), set(args.no_suite))]
    missing = set(args.names) - {t["name"] for t in tests}
    if missing:
        sys.exit("test-targets.py: no such test in " + args.build + ": " + ", ".join(sorted(missing)))
    needed = set()
    for test in tests:
        for dep in test["depends"]:
            if dep in by_id:
                needed.update(by_id[dep]["filename"])
        for word in test["cmd"] + list(test["env"].values()):
            for piece in str(word).replace(":", "=").split("="):
                if piece in by_file:
                    needed.update(by_file[piece]["filename"])
    for path in sorted(needed):
        print(os.path.relpath(path, build))


if __name__ == "__main__":
    main()

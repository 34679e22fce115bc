"""The modes live in their policies: no code of the library (lib/, providers/) names a
PCOLL_MODE_* value but the start policies (lib/collectives/*_policy.cpp) and the mode table
(lib/collectives/mode_table.cpp), so that a new mode is one policy file and one row of the
table. Comments are code here too: a comment that names a mode belongs with that mode.
Also checks that each mode of include/pcoll/pcoll.h has its row in the table."""
import os
import re
import sys

TOKEN = re.compile(r"\bPCOLL_MODE_[A-Z]+\b")


def main():
    root = os.path.abspath(sys.argv[1])
    allowed = re.compile(r"lib/collectives/(\w+_policy|mode_table)\.cpp$")
    errors = []
    for top in ("lib", "providers"):
        for folder, _, names in os.walk(os.path.join(root, top)):
            for name in sorted(names):
                if not name.endswith((".cpp", ".hpp", ".h", ".c")):
                    continue
                path = os.path.join(folder, name)
                rel = os.path.relpath(path, root)
                if allowed.search(rel):
                    continue
                with open(path, errors="replace") as f:
                    for number, line in enumerate(f, 1):
                        for token in TOKEN.findall(line):
                            errors.append(f"{rel}:{number} names {token}: a mode's behaviour belongs in its policy "
                                          f"(lib/collectives/*_policy.cpp) or the mode table")
    with open(os.path.join(root, "include/pcoll/pcoll.h")) as f:
        modes = set(TOKEN.findall(re.search(r"typedef enum \{([^}]*)\} pcoll_mode_t", f.read()).group(1)))
    with open(os.path.join(root, "lib/collectives/mode_table.cpp")) as f:
        table = f.read()
    for mode in sorted(modes):
        if not re.search(r"\{\s*" + mode + r"\s*,\s*\w+_options", table):
            errors.append(f"{mode} has no row in lib/collectives/mode_table.cpp")
    for e in errors:
        print("modes:", e)
    print(f"modes: {len(modes)} modes, {len(errors)} violations")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

"""The settings catalog (every component's rows, api/include/api/settings_catalog.hpp, read from
`pcoll_info --config --json`)
against what is written elsewhere:

- README.md's variable table names exactly the user settings, each with the table's
  default: the default cell's first code span, or a code span in a "(`X` without ...)"
  note for a default that depends on the build; "unset..." for a setting without default.
- every user setting has a "bad value is refused" case in the config suite (the names are
  passed after --refused by tests/meson.build);
- every PCOLL_* variable that the sources, tests, scripts and docs read, set or mention is
  in the table (identifiers of the C API in include/pcoll/ aside).

Usage: readme_settings.py PCOLL_INFO SOURCE_ROOT [--refused NAME...]"""
import json
import os
import re
import subprocess
import sys


def readme_table(path):
    """{name: default cell} of README's `| variable | meaning | default |` table."""
    rows = {}
    inside = False
    with open(path) as f:
        for line in f:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not inside:
                inside = line.startswith("|") and cells == ["variable", "meaning", "default"]
                continue
            if not line.startswith("|"):
                break
            if set(cells[0]) <= set("-: "):
                continue  # the |---| line
            rows[cells[0].strip("`")] = cells[-1]
    return rows


def default_matches(cell, default):
    if default == "":
        return cell.startswith("unset")
    spans = re.findall(r"`([^`]*)`", cell)
    build_dependent = re.findall(r"\(`([^`]*)` without [^)]*\)", cell)
    return (spans and spans[0] == default) or default in build_dependent


# Where a name is read or set: quoted in C/C++ and Python, assigned or expanded in shell and
# meson (NAME= or $NAME), named in Markdown (in backquotes, or NAME=).
PATTERNS = {
    (".cpp", ".hpp", ".c", ".h", ".py"): [r'"(PCOLL_[A-Z0-9_]+)'],
    (".sh", "meson.build"): [r"(?<!-D)\b(PCOLL_[A-Z0-9_]+)=", r"\$\{?(PCOLL_[A-Z0-9_]+)"],
    (".md",): [r"`(PCOLL_[A-Z0-9_]+)", r"\b(PCOLL_[A-Z0-9_]+)="],
}


# Misspellings on purpose: the example of the unknown-name warning (README, tests/meson.build).
TYPO_EXAMPLES = {"PCOLL_TIMEOUT"}


def names_in_tree(root):
    """{name: first file:line} of every PCOLL_* variable the tree reads, sets or mentions."""
    found = {}
    for top in ("src", "tools", "perf", "tests", "scripts", "docs", "README.md"):
        base = os.path.join(root, top)
        paths = [base] if os.path.isfile(base) else [os.path.join(d, n) for d, _, ns in os.walk(base) for n in ns]
        for path in sorted(paths):
            patterns = next((p for ends, p in PATTERNS.items() if path.endswith(ends)), None)
            if patterns is None:
                continue
            with open(path, errors="replace") as f:
                for number, line in enumerate(f, 1):
                    for pattern in patterns:
                        for name in re.findall(pattern, line):
                            if not name.endswith("_"):  # a prefix ("PCOLL_TEST_"), not a name
                                found.setdefault(name, f"{os.path.relpath(path, root)}:{number}")
    return found


def api_identifiers(root):
    names = set()
    folder = os.path.join(root, "include", "pcoll")
    for name in os.listdir(folder):
        with open(os.path.join(folder, name)) as f:
            names.update(re.findall(r"\bPCOLL_[A-Z0-9_]+", f.read()))
    return names


def main():
    pcoll_info, root = sys.argv[1], sys.argv[2]
    refused = set(sys.argv[sys.argv.index("--refused") + 1:]) if "--refused" in sys.argv else set()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PCOLL_")}
    out = subprocess.run([pcoll_info, "--config", "--json"], check=True, capture_output=True, text=True, env=env)
    table = {s["name"]: s for s in json.loads(out.stdout)["settings"]}
    user = {name: s["default"] for name, s in table.items() if s["kind"] == "user"}
    readme = readme_table(os.path.join(root, "README.md"))

    errors = []
    if not readme:
        errors.append("README.md has no '| variable | meaning | default |' table")
    for name in sorted(user.keys() - readme.keys()):
        errors.append(f"README.md's table lacks the user setting {name} (default '{user[name]}')")
    for name in sorted(readme.keys() - user.keys()):
        what = f"a {table[name]['kind']} variable, not a user setting" if name in table else "not in the settings table"
        errors.append(f"README.md's table lists {name}: {what}")
    for name in sorted(user.keys() & readme.keys()):
        if not default_matches(readme[name], user[name]):
            errors.append(f"{name}: README.md's default is '{readme[name]}', the settings table's is "
                          f"'{user[name] or '(none: unset)'}'")
    for name in sorted(user.keys() - refused):
        errors.append(f"{name} has no 'bad {name} is refused' case in tests/meson.build's config suite")
    known = table.keys() | api_identifiers(root) | TYPO_EXAMPLES
    for name, where in sorted(names_in_tree(root).items()):
        if name not in known:
            errors.append(f"{where}: {name} is not in the settings catalog (api/include/api/settings_catalog.hpp)")

    for e in errors:
        print("readme_settings:", e)
    print(f"readme_settings: {len(table)} settings ({len(user)} user), {len(readme)} README rows, "
          f"{len(errors)} problems")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

"""The layering, checked against the build itself.

The layers and the layers each may use are declared once, in the top-level meson.build
(`layer_table`, read from there). A layer is a
folder whose headers sit in include/<name>/, so that every project header is included by a
path naming its layer (<transport/transport.hpp>); `pcoll` is include/pcoll, the public
headers. From that table and the folders this checks that:

- every source of a layer is compiled with the include directories of that layer and of the
  layers it may use (directly or through them) only, read from compile_commands.json: a
  meson.build that widens a layer's include path fails here;
- every #include of a project header in a layer (sources and headers, built or not) names a
  layer it may use, with angle brackets and a layer path: a quoted or relative include could
  resolve against the including file's folder and step around the include directories;
- each layer's include/ holds only include/<name>/;
- the table itself points the way the folders say: nothing in providers/ uses a lib/ layer
  above lib/transport (providers never know what a round is), and no lib/ layer uses
  providers/ (the collectives name no provider; api/, the top layer, wires them in);
- the perf tools that measure what users get are compiled against the public API alone."""
import json
import os
import re
import sys

# Programs that reach pcoll through pcoll.h only, as an application does (pcoll_pingpong
# measures the transport below the API and is not listed).
PUBLIC_ONLY = ["perf/pcoll_allreduce.cpp", "perf/pcoll_imbalance.cpp", "perf/perf_job.cpp",
               "perf/perf_args.cpp", "perf/imbalance_model.cpp",
               "perf/imbalance_options.cpp"]
# The lib/ layers a provider may use.
PROVIDER_BASE = {"lib/support", "lib/transport"}

INCLUDE = re.compile(r'\s*#\s*include\s*([<"])([^">]+)[">]')


def includes(path):
    """(line number, bracket, name) of every #include in the file."""
    with open(path, errors="replace") as f:
        for number, line in enumerate(f, 1):
            m = INCLUDE.match(line)
            if m:
                yield number, m.group(1), m.group(2)


ROW = re.compile(r"\[\s*'(\w+)'\s*,\s*'([\w/]+)'\s*,\s*\[([^\]]*)\]\s*\]")


def parse_graph(source_root):
    """The rows of meson.build's layer_table: name -> folder and the layers it uses."""
    with open(os.path.join(source_root, "meson.build")) as f:
        text = f.read()
    table = re.search(r"layer_table\s*=\s*\[(.*?)\n\]", text, re.S)
    if table is None:
        sys.exit("layering: no layer_table in meson.build")
    layers = {"pcoll": {"folder": "include", "uses": []}}
    providers = []  # 'providers' in a row: every provider row above it (as meson.build reads it)
    for name, folder, uses in ROW.findall(table.group(1)):
        named = re.findall(r"'(\w+)'", uses)
        named = [u for n in named for u in (providers if n == "providers" else [n])]
        layers[name] = {"folder": folder, "uses": named}
        if folder.startswith("providers/") and name not in ("util", "registry"):
            providers.append(name)
    return layers


def closure(layers, name):
    seen, todo = set(), [name]
    while todo:
        n = todo.pop()
        if n in seen or n not in layers:
            continue
        seen.add(n)
        todo.extend(layers[n]["uses"])
    return seen


def main():
    build_dir, source_root = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    layers = parse_graph(source_root)
    errors = []
    rel = lambda p: os.path.relpath(p, source_root)
    # Include directory (relative to the source or build root) -> layer.
    include_dirs = {("include" if n == "pcoll" else os.path.join(l["folder"], "include")): n
                    for n, l in layers.items()}
    for name, layer in layers.items():
        if name == "pcoll":
            continue
        inc = os.path.join(source_root, layer["folder"], "include")
        entries = sorted(os.listdir(inc)) if os.path.isdir(inc) else []
        if entries != [name]:
            errors.append(f"{layer['folder']}/include holds {entries or 'nothing'}; it must hold only {name}/")
        for used in layer["uses"]:
            used_folder = layers.get(used, {}).get("folder", "")
            if layer["folder"].startswith("providers/") and used_folder.startswith("lib/") and used_folder not in PROVIDER_BASE:
                errors.append(f"layer {name} ({layer['folder']}) uses {used} ({used_folder}): providers see lib/support "
                              f"and lib/transport only")
            if layer["folder"].startswith("lib/") and used_folder.startswith("providers/"):
                errors.append(f"layer {name} ({layer['folder']}) uses {used} ({used_folder}): only api/ sees providers")

    def layer_of(path):
        r = rel(path)
        best = None
        for n, l in layers.items():
            if n != "pcoll" and (r == l["folder"] or r.startswith(l["folder"] + "/")):
                if best is None or len(l["folder"]) > len(layers[best]["folder"]):
                    best = n
        return best

    def check_includes(path, allowed, who):
        for number, bracket, name in includes(path):
            head = name.split("/", 1)[0]
            project = head in layers and "/" in name
            if bracket == '"' or ".." in name:
                bare = os.path.basename(name)
                known = any(os.path.isfile(os.path.join(source_root, d, name)) or
                            any(os.path.isfile(os.path.join(source_root, d, h, bare)) for h in layers)
                            for d in include_dirs)
                if project or known or ".." in name:
                    errors.append(f"{rel(path)}:{number} includes \"{name}\": include a layer's header as "
                                  f"<layer/header> through its include directory")
                continue
            if project and head not in allowed:
                errors.append(f"{rel(path)}:{number} ({who}) includes <{name}> of layer {head}, which it may not use")

    with open(os.path.join(build_dir, "compile_commands.json")) as f:
        commands = json.load(f)
    checked = 0
    scanned = set()
    for entry in commands:
        source = os.path.normpath(os.path.join(entry["directory"], entry["file"]))
        name = layer_of(source)
        public_only = rel(source) in PUBLIC_ONLY
        if name is None and not public_only:
            continue
        allowed = closure(layers, name) if name else {"pcoll"}
        who = f"layer {name}" if name else "public API only"
        checked += 1
        for flag in re.findall(r"-I(\S+)", entry["command"]):
            path = os.path.normpath(os.path.join(entry["directory"], flag))
            for root in (source_root, build_dir):
                r = os.path.relpath(path, root)
                if r.startswith(("lib", "providers", "include")) and not r.endswith(".p"):
                    owner = include_dirs.get(r)
                    if owner not in allowed:
                        errors.append(f"{rel(source)} ({who}) is compiled with -I{r}")
        scanned.add(source)
        check_includes(source, allowed, who)
    # Headers, and sources this build does not compile (a disabled provider or bootstrap).
    for name, layer in layers.items():
        if name == "pcoll":
            continue
        for folder, _, names in os.walk(os.path.join(source_root, layer["folder"])):
            for file_name in sorted(names):
                path = os.path.join(folder, file_name)
                if file_name.endswith((".cpp", ".hpp", ".h", ".c")) and path not in scanned and layer_of(path) == name:
                    check_includes(path, closure(layers, name), f"layer {name}")
    if checked < 20:
        errors.append(f"only {checked} layer sources found in compile_commands.json: is this the right build?")
    for e in errors:
        print("layering:", e)
    print(f"layering: {len(layers) - 1} layers, {checked} sources checked, {len(errors)} violations")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

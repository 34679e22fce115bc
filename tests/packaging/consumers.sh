#!/usr/bin/env bash
# pcoll as its users consume it, each building and running tests/packaging/hello_pcoll.c:
#   installed  - against a staged `meson install` through the pkg-config file;
#   cmake      - a CMake project: find_package(pcoll) + target_link_libraries(app pcoll::pcoll);
#   subproject - a parent Meson project with pcoll in subprojects/: dependency('pcoll').
# Usage: consumers.sh BUILD_DIR SOURCE_DIR [installed|cmake|subproject|all]
set -euo pipefail
build=$(cd "$1" && pwd)
source=$(cd "$2" && pwd)
what=${3:-all}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
hello="$source/tests/packaging/hello_pcoll.c"
export PCOLL_BOOTSTRAP=single PCOLL_PROVIDER=ofi:shm

stage_install() {
  [[ -d $work/stage ]] && return
  meson install -C "$build" --destdir "$work/stage" --quiet >/dev/null
  prefix=$(meson introspect "$build" --buildoptions | /usr/bin/python3 -c \
    'import json,sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"]=="prefix"))')
  libdir=$(meson introspect "$build" --buildoptions | /usr/bin/python3 -c \
    'import json,sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"]=="libdir"))')
  staged_prefix="$work/stage$prefix"
  staged_lib="$staged_prefix/$libdir"
}

if [[ $what == installed || $what == all ]]; then
  stage_install
  export PKG_CONFIG_PATH="$staged_lib/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$work/stage"
  flags=$(pkg-config --cflags --libs pcoll)
  cc -o "$work/hello_pkgconfig" "$hello" $flags
  LD_LIBRARY_PATH="$staged_lib" "$work/hello_pkgconfig"
  unset PKG_CONFIG_PATH PKG_CONFIG_SYSROOT_DIR
  echo "installed: pkg-config build ran"
fi

if [[ $what == cmake || $what == all ]]; then
  stage_install
  mkdir -p "$work/cmake_app"
  cp "$hello" "$work/cmake_app/"
  cat > "$work/cmake_app/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.16)
project(hello_pcoll C)
find_package(pcoll 0.2 REQUIRED)
add_executable(hello_pcoll hello_pcoll.c)
target_link_libraries(hello_pcoll pcoll::pcoll)
CMAKE
  cmake -S "$work/cmake_app" -B "$work/cmake_build" -DCMAKE_PREFIX_PATH="$staged_prefix" >/dev/null
  cmake --build "$work/cmake_build" >/dev/null
  LD_LIBRARY_PATH="$staged_lib" "$work/cmake_build/hello_pcoll"
  echo "cmake: find_package(pcoll) build ran"
fi

if [[ $what == subproject || $what == all ]]; then
  mkdir -p "$work/parent/subprojects"
  ln -s "$source" "$work/parent/subprojects/pcoll"
  cp "$hello" "$work/parent/"
  cat > "$work/parent/meson.build" <<'MESON'
project('parent', 'c')
executable('hello_pcoll', 'hello_pcoll.c', dependencies : dependency('pcoll'))
MESON
  # Only the library: the subproject's own options keep the optional parts off.
  # Unoptimised and without debug info: the case checks that the subproject builds and links.
  meson setup "$work/parent/build" "$work/parent" -Ddebug=false -Dpcoll:python=disabled >/dev/null 2>&1 ||
    meson setup "$work/parent/build" "$work/parent" -Ddebug=false >/dev/null
  ninja -C "$work/parent/build" hello_pcoll >/dev/null
  "$work/parent/build/hello_pcoll"
  echo "subproject: dependency('pcoll') build ran"
fi

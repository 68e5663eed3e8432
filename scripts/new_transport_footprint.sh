#!/usr/bin/env bash
# What adding a transport touches: the example transport
# (tests/transports/loopback, with its two knobs) is added as a built-in
# transport to a copy of the source tree (no git needed), and the files that
# differ from the untouched copy are counted outside its folder. Then the
# copy is configured and the engine's generated list of built-in transports
# is compiled: it must include the example's knob table (CONFIG
# kLoopbackKnobs) and its descriptor decoder (decodeLoopbackPeer, named after
# its factory), register the table with the config system and pass the build's
# static check that no key is in two tables; the example's layer compiles
# too.
#   scripts/new_transport_footprint.sh [SOURCE_DIR]
# Prints the files touched outside the folder; exits non-zero unless that is
# exactly one (src/CMakeLists.txt, by one line) and the checks pass. The
# ctest scripts.new_transport_footprint runs it (tests/footprint.cmake).
set -euo pipefail
src=$(cd "${1:-$(dirname "$0")/..}" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
name=loopback
folder=src/transport/$name

copy_tree() {  # the sources, without build folders or git
  mkdir -p "$1"
  tar -C "$src" --exclude='./build*' --exclude=./.git --exclude='__pycache__' -cf - . | tar -C "$1" -xf -
}
copy_tree "$work/before"
copy_tree "$work/after"

# Adding the transport: its folder (built into the library, so not TEST_ONLY:
# an edit inside the folder) ...
cp -r "$work/after/tests/transports/$name" "$work/after/$folder"
sed -i 's/ TEST_ONLY//' "$work/after/$folder/CMakeLists.txt"
# ... and the one line outside it: its name in the list of transports.
sed -i "s/^set(HAWSER_TRANSPORT_DIRS \(.*\))$/set(HAWSER_TRANSPORT_DIRS \1 $name)/" "$work/after/src/CMakeLists.txt"

# Every path that differs (changed, added or removed), relative to the tree.
changed=$(cd "$work" && { diff -rq before after || true; } |
          sed -e 's#^Files before/\([^ ]*\) and .* differ$#\1#' \
              -e 's#^Only in after/\(.*\): \(.*\)$#\1/\2 (added)#' -e 's#^Only in after: \(.*\)$#\1 (added)#' \
              -e 's#^Only in before/\(.*\): \(.*\)$#\1/\2 (removed)#' -e 's#^Only in before: \(.*\)$#\1 (removed)#')
outside=$(printf '%s\n' "$changed" | grep -v -e "^$folder/" -e "^$folder (added)$" | grep . || true)
count=$(printf '%s' "$outside" | grep -c . || true)
lines=$(diff "$work/before/src/CMakeLists.txt" "$work/after/src/CMakeLists.txt" | grep -c '^>' || true)
inside=$(cd "$work/after/$folder" && find . -type f | wc -l)
echo "files in $folder: $inside (added)"
echo "files touched outside $folder: $count"
printf '%s\n' "$outside" | sed 's/^/  /'
echo "lines changed in src/CMakeLists.txt: $lines"
[ "$count" -eq 1 ] && [ "$outside" = "src/CMakeLists.txt" ] && [ "$lines" -eq 1 ] || {
  echo "FAIL: adding a transport must touch only its folder and one line of src/CMakeLists.txt" >&2
  exit 1
}

# The copy configures with the transport in it, and the generated list
# registers its knobs.
cmake -S "$work/after" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHAWSER_TEST_PROGRAMS=OFF \
  -DHAWSER_BUILD_EXAMPLES=OFF -DHAWSER_WITH_PYTHON=OFF >"$work/configure.log" 2>&1 || {
  cat "$work/configure.log" >&2
  exit 1
}
gen="$work/build/src/engine/builtin_transports.cpp"
for want in "#include \"transport/$name/${name}_config.h\"" "{\"$name\", kLoopbackKnobs}," \
            "{\"$name\", &makeLoopbackTransport, kLoopbackKnobs, &decodeLoopbackPeer},"; do
  grep -qF "$want" "$gen" || { echo "FAIL: $gen lacks: $want" >&2; exit 1; }
done
echo "generated list: registers kLoopbackKnobs ($(grep -c '^  {"loopback\.' "$work/after/$folder/${name}_config.h") knobs)"
obj=$(ninja -C "$work/build" -t targets all | grep -o '^[^:]*builtin_transports\.cpp\.o' | head -1)
ninja -C "$work/build" "$obj" hawser_transport_$name >"$work/build.log" 2>&1 || {
  cat "$work/build.log" >&2
  exit 1
}
echo "compiled: the generated list (static check: no key in two tables) and the $name layer"
echo "OK"

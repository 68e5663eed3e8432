#!/usr/bin/env bash
# The Debian package CPack builds from BUILD_DIR: control fields, the files it
# holds, and, extracted with dpkg -x, the hawser CLI and the Python module
# running from it (LD_LIBRARY_PATH/PYTHONPATH into the extracted tree).
# Usage: deb_check.sh BUILD_DIR VERSION [PYTHON]
set -euo pipefail
build=$1 version=$2 py=${3:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && cpack -G DEB --config "$build/CPackConfig.cmake" -B "$tmp/out" >"$tmp/cpack.log" 2>&1) ||
  { cat "$tmp/cpack.log"; exit 1; }
deb=$(ls "$tmp"/out/hawser_*.deb)
info=$(dpkg-deb -I "$deb")
fail() { echo "deb_check: $*"; echo "$info"; exit 1; }
grep -q "^ Package: hawser$" <<<"$info" || fail "no 'Package: hawser'"
grep -q "^ Version: $version$" <<<"$info" || fail "no 'Version: $version'"
grep -q "^ Depends: .*libc6" <<<"$info" || fail "Depends lacks libc6 (dpkg-shlibdeps did not run?)"
grep -q "^ Depends: .*libspdlog" <<<"$info" || fail "Depends lacks libspdlog"
files=$(dpkg-deb -c "$deb" | awk '{print $6}')
for f in ./usr/bin/hawser ./usr/include/hawser/engine.h ./usr/include/hawser/c_api.h \
         ./usr/lib/pkgconfig/hawser.pc ./usr/lib/cmake/hawser/hawserConfig.cmake; do
  grep -qx "$f" <<<"$files" || fail "no $f in the package"
done
grep -q "^./usr/lib/libhawser.so.$version$" <<<"$files" || fail "no ./usr/lib/libhawser.so.$version"
if [ -n "${3:-}" ]; then
  grep -q "^./usr/lib/python3/dist-packages/hawser\..*\.so$" <<<"$files" || fail "no Python module"
fi
dpkg -x "$deb" "$tmp/root"
out=$(LD_LIBRARY_PATH="$tmp/root/usr/lib" "$tmp/root/usr/bin/hawser" --version)
[ "$out" = "hawser $version" ] || fail "installed hawser --version: '$out'"
"$tmp/root/usr/bin/hawser" config >/dev/null
[ -z "${3:-}" ] || (cd "$tmp" && PYTHONPATH="$tmp/root/usr/lib/python3/dist-packages" "$py" -c "
import hawser, hawser.mooncake as mc
assert hawser.__file__.startswith('$tmp/root/'), hawser.__file__
e = mc.TransferEngine()
assert e.initialize('127.0.0.1', 'P2PHANDSHAKE', 'tcp', '') == 0, hawser.last_error()
print('deb: hawser', hawser.__version__, 'imports and initializes from the package')
")
echo "deb_check: $(basename "$deb") ok"

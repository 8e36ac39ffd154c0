#!/bin/bash
# The SDK as a user meets it: install nibble into a temporary prefix, build the out-of-tree
# third-party plugin and host program against the installed pkg-config only, and run them.
#   test_sdk.sh SOURCE_DIR
set -euo pipefail
src=$(cd "$1" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
unset NIBBLE_PLUGIN_PATH NIBBLE_CONFIG NIBBLE_BACKEND PKG_CONFIG_PATH
fixtures="$src/tests/data/fixtures"
fail=0
check() {  # check DESCRIPTION COMMAND...: runs the command, prints ok/FAIL
  local what=$1; shift
  if "$@" >"$tmp/out" 2>&1; then echo "ok: $what"; else echo "FAIL: $what"; sed 's/^/  /' "$tmp/out" | tail -20; fail=1; fi
}
has() { grep -q -- "$1" "$tmp/out"; }

echo "== build and install nibble into $tmp/prefix"
meson setup "$tmp/build" "$src" --prefix="$tmp/prefix" -Dtests=false -Dcuda=disabled -Drocm=disabled >/dev/null
ninja -C "$tmp/build" >/dev/null
meson install -C "$tmp/build" --quiet
pc=$(find "$tmp/prefix" -name nibble.pc)
export PKG_CONFIG_PATH=$(dirname "$pc")
nibble="$tmp/prefix/bin/nibble"

check "pkg-config --cflags --libs nibble" pkg-config --cflags --libs nibble
pluginsdir=$(pkg-config --variable=pluginsdir nibble)
check "pluginsdir holds the installed cpu_w4a16" test -f "$pluginsdir/cpu_w4a16.so"
check "installed headers include plugin_abi.h and plugin_support.h" test -f "$tmp/prefix/include/nibble/plugin_abi.h" -a -f "$tmp/prefix/include/nibble/plugin_support.h"
check "the installed CLI finds the installed plugins with no environment" "$nibble" plugins --json
has '"name": "cpu_w4a16"' || { echo "FAIL: cpu_w4a16 not listed"; fail=1; }

echo "== the installed Python package finds the installed library and plugins"
pkgdir=$(dirname "$(dirname "$(find "$tmp/prefix" -path '*/nibble/_location.py' | head -1)")")
py=/usr/bin/python3; [[ -x $py ]] || py=python3
check "the Python package is installed" test -f "$pkgdir/nibble/core.py"
check "import nibble from the install lists cpu_w4a16" env PYTHONPATH="$pkgdir" "$py" -c \
  "import nibble; names = [b.name for b in nibble.Registry().backends]; print(nibble.library_path, names); assert 'cpu_w4a16' in names, names"
has "$tmp/prefix" || { echo "FAIL: the package did not load the installed library"; fail=1; }

echo "== the third-party plugin, out of tree, against pkg-config only"
meson setup "$tmp/tp" "$src/examples/third_party_plugin" --prefix="$tmp/extra" >/dev/null
ninja -C "$tmp/tp" >/dev/null
meson install -C "$tmp/tp" --quiet
extra=$(dirname "$(find "$tmp/extra" -name example_scalar.so)")
export NIBBLE_PLUGIN_PATH="$extra"
check "nibble plugins lists example_scalar from NIBBLE_PLUGIN_PATH" "$nibble" plugins
has "example_scalar" || { echo "FAIL: example_scalar not listed"; fail=1; }

model="$fixtures/gptq_v1_sym_g128"
check "explain: both backends compete, cpu_w4a16 wins on priority" "$nibble" explain --model "$model" --json
python3 - "$tmp/out" <<'PY' || fail=1
import json, sys
doc = json.load(open(sys.argv[1]))
for l in doc["layers"]:
    if l["status"] != "quantized": continue
    sel = l["selection"]; verdicts = {c["backend"]: c["verdict"] for c in sel["candidates"]}
    assert sel["winner"] == "cpu_w4a16", sel
    assert verdicts.get("example_scalar") == "viable", verdicts
print("ok: explain verdicts")
PY
printf 'prefer = ["example_scalar"]\n' > "$tmp/prefer.toml"
printf 'deny = ["cpu_w4a16"]\n' > "$tmp/deny.toml"
printf 'pin = "example_scalar"\nstrict = true\n' > "$tmp/pin.toml"
for p in prefer deny pin; do
  check "policy $p selects example_scalar" "$nibble" explain --model "$model" --config "$tmp/$p.toml"
  has "-> example_scalar" || { echo "FAIL: $p did not select example_scalar"; fail=1; }
done
check "a strict pin to example_scalar explains why it cannot run act order" bash -c \
  "! '$nibble' explain --model '$fixtures/gptq_v1_sym_actorder_g128' --config '$tmp/pin.toml'"
has "act order (g_idx) not supported" || { echo "FAIL: no act-order reason"; fail=1; }
check "the third-party plugin verifies a real checkpoint" "$nibble" verify --model "$model" --reference "$model/reference.safetensors" --backend example_scalar

echo "== the host program, out of tree, against pkg-config only"
meson setup "$tmp/host" "$src/examples/host_app" >/dev/null
ninja -C "$tmp/host" >/dev/null
check "host_app runs a checkpoint with the installed cpu backend" "$tmp/host/host_app" "$fixtures/awq_gemm_g128"
has "matches the reference" || { echo "FAIL: host_app output"; fail=1; }
check "host_app follows a policy file to the third-party backend" "$tmp/host/host_app" "$model" "$tmp/prefer.toml"
has "-> example_scalar" || { echo "FAIL: host_app did not use example_scalar"; fail=1; }

exit $fail

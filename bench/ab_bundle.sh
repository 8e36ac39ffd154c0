#!/bin/bash
# bench/ab_bundle.sh OLD NEW [DEST]: packs two builds for bench/ab.sh on the GPU machine (its
# Xeon host or its GPU): each build's nibble, libnibble and the plugin AB_PLUGIN (default
# cpu_w4a16; cuda_w4a16 for the GPU) (tree kept, so that
# nibble's $ORIGIN/../../core finds its own libnibble) under DEST/old and DEST/new, the
# non-system libraries they load once under DEST/lib (libdnnl compressed with xz; ab.sh
# unpacks it there). OLD and NEW are build directories (configured with the plugin and built);
# OLD "-" packs NEW alone, for sides that are settings of one build (AB_SIDES in ab.sh);
# DEST defaults to .gpu (ignored by git; replaced).
set -euo pipefail
cd "$(dirname "$0")/.."
old=${1:?usage: bench/ab_bundle.sh OLD_BUILD NEW_BUILD [DEST]}
new=${2:?usage: bench/ab_bundle.sh OLD_BUILD NEW_BUILD [DEST]}
dest=${3:-.gpu}
plugin=${AB_PLUGIN:-cpu_w4a16}
files=(tools/nibble/nibble core/libnibble.so.0 plugins/$plugin/$plugin.so)
sides=(old new)
[[ $old == - ]] && sides=(new)
for side in "${sides[@]}"; do
  b=$old
  [[ $side == new ]] && b=$new
  for f in "${files[@]}"; do [[ -e "$b/$f" ]] || { echo "no $f in $b: build it first" >&2; exit 1; }; done
done
if [[ $old != - ]] && cmp -s "$old/plugins/$plugin/$plugin.so" "$new/plugins/$plugin/$plugin.so"; then
  echo "the two builds have the same $plugin.so: nothing to compare" >&2
  exit 1
fi
rm -rf "$dest"
mkdir -p "$dest/lib"
# What the Xeon host provides itself (glibc, the compiler's runtime) and each build's own libnibble.
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libgcc_s\.so|libnibble\.so)'
for side in "${sides[@]}"; do
  b=$old
  [[ $side == new ]] && b=$new
  for f in "${files[@]}"; do
    mkdir -p "$dest/$side/$(dirname "$f")"
    cp -L "$b/$f" "$dest/$side/$f"
    ldd "$b/$f" | awk '/=> \//{print $1" "$3}' | while read -r name path; do
      [[ "$name" =~ $skip ]] && continue
      [[ -e "$dest/lib/$name" ]] || cp -L "$path" "$dest/lib/$name"
    done
  done
  echo "$b $(md5sum <"$dest/$side/plugins/$plugin/$plugin.so" | cut -d' ' -f1)" >"$dest/$side/origin.txt"
done
bench/bundle_pack.sh "$dest"

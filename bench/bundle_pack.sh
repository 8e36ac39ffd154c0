#!/bin/bash
# bench/bundle_pack.sh DEST: the last step of the CPU bundles (xeon_bundle.sh, ab_bundle.sh):
# compresses libdnnl and large plugins with xz (the run scripts unpack them there) and checks that DEST and the tracked
# tree together stay under the device tool's 64 MiB. Run from the repository root.
set -euo pipefail
dest=${1:?usage: bench/bundle_pack.sh DEST}
for lib in "$dest"/lib/libdnnl.so*; do
  [[ -f "$lib" && "$lib" != *.xz ]] && xz -T0 -9 -f "$lib"
done
# A plugin of GPU code (the CUDA plugin's fatbinary: ~20 MiB, ~4 compressed) likewise (bench/ab.sh
# unpacks it).
find "$dest" -path '*/plugins/*' -name '*.so' -size +8M -exec xz -T0 -6 -f {} \;
tree=$(git ls-files -z | du -c --files0-from=- 2>/dev/null | tail -1 | cut -f1)
bundle=$(du -sk "$dest" | cut -f1)
echo "bundle $dest: $((bundle / 1024)) MiB; tracked tree: $((tree / 1024)) MiB; together $(((bundle + tree) / 1024)) MiB (the device tool takes 64)"
((bundle + tree < 60 * 1024)) || { echo "too large for the device tool" >&2; exit 1; }

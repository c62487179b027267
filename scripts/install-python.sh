#!/usr/bin/env bash
# Puts the weft Python package that the build assembled (build/python/weft) on
# the path of this machine's python3 interpreters, as `pip install -e` would:
# a weft.pth file in each one's site-packages (or user site-packages when that
# is not writable) names build/python. Interpreters of another Python version
# than the one the package was built for are left alone. WEFT_NO_PYTHON_PATH=1
# skips this; `cmake --install build --component python` copies the package
# instead.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${WEFT_BUILD_DIR:-$root/build}
package="$build/python"
[ "${WEFT_NO_PYTHON_PATH:-0}" = 1 ] && exit 0
extension=$(ls "$package"/weft/_weft*.so 2>/dev/null | head -1)
[ -n "$extension" ] || exit 0   # built without the Python package
tag=$(basename "$extension" | sed -n 's/^_weft\.cpython-\([0-9]*\)-.*/\1/p')

seen=""
for python in $(type -ap python3) /usr/bin/python3; do
  [ -x "$python" ] || continue
  real=$(readlink -f "$python")
  case " $seen " in *" $real "*) continue ;; esac
  seen="$seen $real"
  version=$("$python" -c 'import sys; print("%d%d" % sys.version_info[:2])' 2>/dev/null) || continue
  [ "$version" = "$tag" ] || continue
  site=$("$python" - <<'PY'
import os, site, sysconfig
for path in [sysconfig.get_path("purelib"), site.getusersitepackages()]:
    try:
        os.makedirs(path, exist_ok=True)
        if os.access(path, os.W_OK):
            print(path)
            break
    except OSError:
        pass
PY
) || continue
  [ -n "$site" ] || continue
  if [ "$(cat "$site/weft.pth" 2>/dev/null)" != "$package" ]; then
    echo "$package" > "$site/weft.pth"
    echo "weft: $python imports weft from $package (via $site/weft.pth)"
  fi
done

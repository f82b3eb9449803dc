# Sourced by the docs/verified/*.sh scripts on the GPU host (repo root): unpacks the packed
# site (.devsite, see ../shared/tools/GPU.md), sets $out for the figures and a kopt function.
if [ -f .devsite/site.tar.xz ]; then
  mkdir -p /tmp/site && tar -xJf .devsite/site.tar.xz -C /tmp/site
  export PYTHONPATH=/tmp/site:$PWD
fi
export PYTHONUNBUFFERED=1
out=${OUT:-/tmp/kopt-verify}
mkdir -p "$out"
kopt() { python3 -m kopt.cli "$@"; }

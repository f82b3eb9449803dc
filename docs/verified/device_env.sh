# Sourced by the docs/verified/*.sh scripts on the GPU host (repo root): unpacks the packed
# site (.devsite, see ../shared/tools/GPU.md), sets $out for the figures and a kopt function.
if [ -f .devsite/site.tar.xz ]; then
  mkdir -p /tmp/site && tar -xJf .devsite/site.tar.xz -C /tmp/site
  export PYTHONPATH=/tmp/site:$PWD
fi
# single wheels the packed site lacks (google-re2 for kopt.tools.triage: `pip download --no-deps
# --only-binary=:all: --python-version 3.12 ... -d .devsite/whl google-re2`)
for w in .devsite/whl/*.whl; do [ -f "$w" ] && python3 -m zipfile -e "$w" /tmp/site; done  # no unzip there
# the CUTLASS sweeps' headers (`pkg:cutlass_library/...`, found by importlib's find_spec, which
# imports nothing) where the host lacks nvidia-cutlass: .devsite/cutlass-headers.tar.xz holds
# the 4.2.0.0 wheel's source/include and source/tools/util/include under cutlass_library/
if ! python3 -c "import importlib.util as u, sys; sys.exit(u.find_spec('cutlass_library') is None)" \
   && [ -f .devsite/cutlass-headers.tar.xz ]; then
  mkdir -p /tmp/site && tar -xJf .devsite/cutlass-headers.tar.xz -C /tmp/site
fi
# kernel mode needs cuda.bindings 13 (nvrtc + driver) and cuda.pathfinder; the host image has
# its own: use it when it imports, else the carried wheels (.devsite/cuda/*.whl)
if ! python3 -c "from cuda.bindings import nvrtc, driver; import cuda.pathfinder" 2>/dev/null \
   && ls .devsite/cuda/*.whl > /dev/null 2>&1; then
  mkdir -p /tmp/site-cuda && for w in .devsite/cuda/*.whl; do unzip -qo "$w" -d /tmp/site-cuda; done
  export PYTHONPATH=/tmp/site-cuda:${PYTHONPATH:-$PWD}
fi
python3 -c "import cuda.bindings, sys; print('cuda.bindings', cuda.bindings.__version__, file=sys.stderr)" || true
# byte-compile the carried site and the tree once, as `pip install` does: without it every
# fresh Ray worker compiled ray's and kopt's sources again (seen in py-spy: 1.5 s of a
# driver's start in source_to_code, 2026-12-01)
python3 -m compileall -q -j 0 /tmp/site kopt workers > /dev/null 2>&1 || true
# the host image's own packages too (torch: 4.5-7 s per `import torch` without .pyc, paid by
# every harness and ncu target; numpy and cupy for Kernel Tuner), as their install would have
pkgdirs=$(python3 -c "import importlib.util as u
for m in ('torch', 'numpy', 'cupy'):
    s = u.find_spec(m)
    if s and s.submodule_search_locations: print(list(s.submodule_search_locations)[0])" 2>/dev/null)
[ -n "$pkgdirs" ] && python3 -m compileall -q -j 0 $pkgdirs > /dev/null 2>&1
echo "PYTHONDONTWRITEBYTECODE=${PYTHONDONTWRITEBYTECODE:-unset}" >&2
export PYTHONUNBUFFERED=1
out=${OUT:-/tmp/kopt-verify}
mkdir -p "$out"
kopt() { python3 -m kopt "$@"; }  # kopt/__main__.py: the `kopt` command in any layout

#!/bin/sh
# What the GPU machine lacks (onnxruntime-gpu, z3, onnxsim, onnxslim, click, sqlite-utils) travels as one bundle cut
# in 4 parts of 61.5 MB, one per device call, back to back (the machine goes back ~30 s after a call, the parts
# with it). A call carries the working tree too (64 MiB in all), so while the parts travel the tree is hidden from
# git: nothing tracked or untracked-not-ignored is sent. Made here once (the lease of 2026-11-29 installed in 4
# calls, 62 s of device time):
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 -d /tmp/w onnxruntime-gpu==1.31.1   (and the others' wheels into /tmp/bundle;
#     onnxruntime-gpu unzipped and tarred as ort-site.tar.xz, z3-solver's installed tree as z3-site.tar.xz)
#   echo /.lease/ >> .git/info/exclude; mkdir -p .lease
#   (cd /tmp/bundle && tar -cf - .) | split -b 61500000 -d -a 1 - .lease/part
# Then, before the first part's call:  cp .git/info/exclude /tmp/exclude.bak; echo '/*' >> .git/info/exclude;
#   git rm -r -q --cached .          (the files stay; only the index empties)
# and one call per part, carrying it and this script copied into .lease/ (the tree is hidden, so it would not travel):
#   run(command="sh .lease/ortgpu-device.sh", carry=[".lease/part0", ".lease/ortgpu-device.sh"]) ... part3
# then at once:  git reset -q && cp /tmp/exclude.bak .git/info/exclude   (the index back), and the work calls with
# PYTHONPATH=/tmp/site:$PWD.
PARTS=${PARTS:-4}
mkdir -p /tmp/parts && cp .lease/part* /tmp/parts/ 2>/dev/null
have=$(ls /tmp/parts | wc -l)
if [ "$have" -lt "$PARTS" ]; then echo "bundle: $have of $PARTS parts here"; exit 0; fi
set -e
mkdir -p /tmp/b /tmp/site
cat /tmp/parts/part* | tar -x -C /tmp/b
xz -T8 -dc /tmp/b/ort-site.tar.xz | tar -x -C /tmp/site
xz -T8 -dc /tmp/b/z3-site.tar.xz | tar -x -C /tmp/site
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site /tmp/b/*.whl
rm -rf /tmp/b /tmp/parts
PYTHONPATH=/tmp/site python3 -c 'import onnxruntime as o, z3, onnxsim, onnxslim; print("onnxruntime", o.__version__,
  o.get_available_providers(), "z3", z3.get_version_string())'

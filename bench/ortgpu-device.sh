#!/bin/sh
# onnxruntime-gpu on the GPU machine, which has no network and only the CPU build: its installed tree travels as an
# xz tar cut in parts small enough for one device call each (the repository takes ~30 MB of the 64 MiB a call
# carries). Made here once:
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 -d /tmp/w onnxruntime-gpu==1.31.1
#   mkdir /tmp/s && (cd /tmp/s && unzip -q /tmp/w/onnxruntime_gpu-*.whl) && tar -cf - -C /tmp/s . | xz -T2 -6 \
#     | split -b 32000000 -d -a 1 - .ortx/part   (7 parts; echo /.ortx/ >> .git/info/exclude first)
# Then one call per part, back to back (the machine is given back ~30 s after a call, and the parts with it):
#   run(command="sh bench/ortgpu-device.sh", carry=[".ortx/part0"]) ... and the last part's call goes on with
#   the work:  sh bench/ortgpu-device.sh && export PYTHONPATH=/tmp/site:$PWD && python3 bench/...
# It installs once every part is there (the count is PARTS) and says which are missing otherwise.
PARTS=${PARTS:-7}
mkdir -p /tmp/ortw && cp .ortx/part* /tmp/ortw/ 2>/dev/null
have=$(ls /tmp/ortw | wc -l)
if [ "$have" -lt "$PARTS" ]; then echo "onnxruntime-gpu: $have of $PARTS parts here"; exit 0; fi
mkdir -p /tmp/site && cat /tmp/ortw/part* | xz -d | tar -x -C /tmp/site && \
  PYTHONPATH=/tmp/site python3 -c 'import onnxruntime as o; print("onnxruntime", o.__version__, o.get_available_providers())'

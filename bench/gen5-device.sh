#!/bin/sh
# Issue 30's five-op run: `subst generate --max-ops 5` over bench/configs/gen5-2d.json through Ray on the GPU machine's
# 16 CPU cores (no network there). Made for the device tool, from the repository's root, carrying .whl (made here
# as bench/README.md says: Ray's tree compressed, Ray's missing needs and sqlite-utils as wheels):
#   run(command="sh bench/gen5-device.sh", carry=[".whl"], timeout_s=600)
# Estimate from 3 and 4 ops over the same set on the 2-core machine (3.1 s, 64 s; 11,055 and 425,521 graphs):
# ~19 M graphs at 5 ops, about 5 min.
set -e
mkdir -p /tmp/site
tar -xJf .whl/ray-site.tar.xz -C /tmp/site
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH="/tmp/site:$PWD" PYTHONUNBUFFERED=1
nproc; free -g | head -2; python3 -c 'import ray, numpy; print("ray", ray.__version__, "numpy", numpy.__version__)'
python3 bench/bench_generate.py --bare --max-ops 5 --config bench/configs/gen5-2d.json --executor ray --workers 16 \
  --result "$OUT/generate-16cpu-5ops-gen5-2d-ray.json" 2>&1 | tee "$OUT/log" | grep -v "^ *[0-9] ops |" || true
tail -c 4000 "$OUT/log"

#!/bin/sh
# Issue 49's H200 cost table: every corpus model run cold with `subst optimize --no-prior` (every unit measured on
# this GPU, the shipped tables ignored), one bench_cold process per GPU present (CUDA_VISIBLE_DEVICES=i), the
# models shared out biggest first. Each writes DIR/cold-gpu<i>.json and DIR/costs/<model>.json after every model,
# starts none past STOP_AFTER (480) seconds and stops one still going at CUT_AT (540), unrecorded, so that a
# 10-minute device call ends cleanly; DIR/reference_costs_h200.json is then the merge of every export so far
# (models/merge_costs.py --same-device). Made for the device tool, from the repository's root, onnxruntime-gpu
# under /tmp/site:
#   run(command="sh bench/h200-table.sh $OUT", kind="nvidia-h200-x4", timeout_s=600)
# Where that call leaves models to do (its DIR/left says which), copy its $OUT into the tree (say h200-1/,
# untracked, so it travels) and go on from it, skipping what it did:
#   run(command="sh bench/h200-table.sh $OUT h200-1", kind="nvidia-h200-x4", timeout_s=600)
# Then here: cp h200-2/reference_costs_h200.json taso/cost/ (the H200's prior, `taso.cost.tables.PRIORS`).
# MODELS (comma-separated), GPUS and DEVICE=cpu narrow it for a try on the CPU:
#   MODELS=squeezenet1_1_ts GPUS=1 DEVICE=cpu sh bench/h200-table.sh /tmp/h200-try
set -e
DIR=${1:?usage: sh bench/h200-table.sh OUTDIR [EARLIER_OUTDIR]}
mkdir -p "$DIR/costs"
if [ -n "$2" ]; then cp -R "$2"/. "$DIR"/ && chmod -R u+w "$DIR"; fi
export PYTHONPATH="${PYTHONPATH:-/tmp/site:$PWD}" PYTHONUNBUFFERED=1
GPUS=${GPUS:-$(nvidia-smi -L | grep -c '^GPU')}
python3 - "$DIR" "$GPUS" > "$DIR/shards" <<'EOF'
import json, os, sys
from pathlib import Path
sys.path.insert(0, "models")
import corpus
out, n = Path(sys.argv[1]), int(sys.argv[2])
done = {m for f in out.glob("cold-gpu*.json") for m in json.loads(f.read_text())["models"]}
names = os.environ["MODELS"].split(",") if os.environ.get("MODELS") else corpus.NAMES
left = sorted((m for m in names if m not in done), key=lambda m: -(corpus.CORPUS / f"{m}.onnx").stat().st_size)
shards = [[] for _ in range(n)]
for m in left:  # the biggest first, each to the shard with the least so far
    min(shards, key=lambda s: sum((corpus.CORPUS / f"{x}.onnx").stat().st_size for x in s)).append(m)
print("\n".join(",".join(s) for s in shards))
print(f"{len(done)} models done, {len(left)} left over {n} GPUs", file=sys.stderr)
EOF
i=0
while read -r models; do
  if [ -n "$models" ]; then
    CUDA_VISIBLE_DEVICES=$i python3 bench/bench_cold.py --device "${DEVICE:-cuda}" --cold-only --no-prior --measure-limit 400 \
      --stop-after "${STOP_AFTER:-480}" --cut-at "${CUT_AT:-540}" --resume --models "$models" \
      --export-costs "$DIR/costs" --result "$DIR/cold-gpu$i.json" > "$DIR/log-gpu$i" 2>&1 &
  fi
  i=$((i + 1))
done < "$DIR/shards"
wait
python3 - "$DIR" > "$DIR/left" <<'EOF'
import json, os, sys
from pathlib import Path
sys.path.insert(0, "models")
import corpus
done = {m for f in Path(sys.argv[1]).glob("cold-gpu*.json") for m in json.loads(f.read_text())["models"]}
names = os.environ["MODELS"].split(",") if os.environ.get("MODELS") else corpus.NAMES
print(",".join(m for m in names if m not in done))
EOF
echo "left: $(cat "$DIR/left")"
python3 models/merge_costs.py --same-device "$DIR"/costs/*.json -o "$DIR/reference_costs_h200.json"
tail -n 4 "$DIR"/log-gpu*

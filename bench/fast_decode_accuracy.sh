#!/usr/bin/env bash
# data.fast_decode's accuracy effect (bench/README, "JPEG folders through the input pipeline"):
# Fashion-MNIST written as an ImageNet-layout JPEG folder (28 x 28 upscaled to 224 x 224 RGB,
# quality 90; 12,000 training and 2,000 test images), then CifarNet at 24 x 24 with inception
# preprocessing, full decode and fast decode, seeds 1 and 2; one line per run.
# Usage: bash bench/fast_decode_accuracy.sh [TERNGRAD] [WORKDIR]
#   TERNGRAD  the binary (default build/cmd/terngrad);  WORKDIR  default /tmp/tg-fast-decode
# Needs Debian's dataset-fashion-mnist and python3-pil (/usr/bin/python3).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TG=${1:-$ROOT/build/cmd/terngrad}
WORK=${2:-/tmp/tg-fast-decode}
SRC=/usr/share/datasets/fashion-mnist
[ -x "$TG" ] || { echo "fast_decode_accuracy: no terngrad binary at $TG" >&2; exit 1; }
[ -f "$SRC/train-images-idx3-ubyte.gz" ] || { echo "fast_decode_accuracy: $SRC missing (apt-get install dataset-fashion-mnist)" >&2; exit 1; }
mkdir -p "$WORK"
if [ ! -d "$WORK/folder/val" ]; then
  /usr/bin/python3 - "$SRC" "$WORK/folder" <<'PY'
import gzip, os, struct, sys
from PIL import Image
src, out = sys.argv[1], sys.argv[2]
def idx(name):
    d = gzip.open(os.path.join(src, name)).read()
    if d[3] == 3:
        n, h, w = struct.unpack(">III", d[4:16])
        return [d[16 + i * h * w:16 + (i + 1) * h * w] for i in range(n)]
    return list(d[8:8 + struct.unpack(">I", d[4:8])[0]])
for split, images, labels, count in (("train", "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", 12000),
                                     ("val", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz", 2000)):
    x, y = idx(images), idx(labels)
    for i in range(count):
        d = os.path.join(out, split, "c%d" % y[i])
        os.makedirs(d, exist_ok=True)
        im = Image.frombytes("L", (28, 28), x[i]).resize((224, 224), Image.BILINEAR).convert("RGB")
        im.save(os.path.join(d, "%05d.jpg" % i), quality=90)
PY
fi
for fast in false true; do
  for seed in 1 2; do
    out=$WORK/run-$fast-$seed
    rm -rf "$out"
    "$TG" train --no-progress --config "$ROOT/paper/configs/cifarnet_cifar10.toml" \
      --set data.name=image-folder --set data.path="$WORK/folder" --set data.preprocess=inception \
      --set data.image_size=24 --set data.fast_decode=$fast --set train.iterations=1500 \
      --set train.eval_every=0 --set train.checkpoint_every=0 --set train.seed=$seed \
      --set train.lr=0.001 --set data.eval_batch_size=500 --out "$out" 2> "$out.log" |
      /usr/bin/python3 -c "import json, sys; d = json.load(sys.stdin); print(json.dumps({'fast_decode': $( [ $fast = true ] && echo True || echo False ), 'seed': $seed, 'test_accuracy': d['test_accuracy']}))"
  done
done

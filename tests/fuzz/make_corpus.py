#!/usr/bin/python3
"""Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<name>/seed_*): small valid
inputs of each format, so the fuzzers start inside the parsers. Deterministic (fixed seeds, no
timestamps); rerun after changing a format and commit the result. Crash reproducers the fuzzers
found (crash_*) and the inputs of fuzz runs that add the most coverage (cov_*, chosen by
pick_inputs.py) live beside the seeds and are not touched here.
Needs Pillow for the JPEG seeds (Debian: python3-pil, which python3-matplotlib pulls in).

Usage: /usr/bin/python3 tests/fuzz/make_corpus.py
"""
import gzip
import io
import json
import os
import random
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def write(name, seed, data):
    d = os.path.join(HERE, "corpus", name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed_" + seed), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def gz(data):  # mtime 0: the same bytes on every run
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as f:
        f.write(data)
    return buf.getvalue()


def main():
    rng = random.Random(15)

    # config: the paper recipes, then overrides after '\0' separators.
    for name in ["lenet_mnist", "cifarnet_cifar10"]:
        with open(os.path.join(ROOT, "paper", "configs", name + ".toml")) as f:
            write("config", name, f.read())
    write("config", "overrides", "[train]\nlr = 0.01\n\0train.iterations=5\0compression.method=terngrad"
          "\0model.num_classes=10\0train.lr_boundaries=[1, 2]")
    write("config", "nested", "a = { b = [1, [2, {c.d = 3}]] }\n[x.y]\n\"q\" = '''s'''\n")

    # perf_cluster
    write("perf_cluster", "full", "name = \"c\"\ndescription = \"two nodes\"\ngpus_per_node = 2\n"
          "full_duplex = true\ngpu = \"p100\"\n[intra]\nbandwidth_gbit = 100\nlatency_us = 2\n"
          "[inter]\nbandwidth_gbit = 10\nlatency_us = 5.5\n")
    write("perf_cluster", "minimal", "gpus_per_node = 4\n[intra]\nbandwidth_gbit = 1\n"
          "[inter]\nbandwidth_gbit = 1\n")

    # idx: 2 images + 2 labels, raw and gzipped, and two gzip members.
    images = struct.pack(">IIII", 2051, 2, 28, 28) + bytes(rng.randrange(256) for _ in range(2 * 784))
    labels = struct.pack(">II", 2049, 2) + bytes([3, 7])
    write("idx", "images_raw", images)
    write("idx", "labels_raw", labels)
    write("idx", "images_gz", gz(images))
    write("idx", "labels_gz", gz(labels))
    write("idx", "labels_two_members", gz(labels[:5]) + gz(labels[5:]))

    # cifar10: two records.
    recs = b"".join(bytes([c]) + bytes(rng.randrange(256) for _ in range(3072)) for c in (0, 9))
    write("cifar10", "two_records", recs)

    # image_folder: small JPEGs, baseline / progressive / grayscale / CMYK.
    from PIL import Image
    img = Image.new("RGB", (9, 7))
    img.putdata([(rng.randrange(256), rng.randrange(256), rng.randrange(256)) for _ in range(63)])
    for seed, mode, kw in [("baseline", "RGB", {}), ("progressive", "RGB", {"progressive": True}),
                           ("gray", "L", {}), ("cmyk", "CMYK", {})]:
        buf = io.BytesIO()
        img.convert(mode).save(buf, "JPEG", quality=50, **kw)
        write("image_folder", seed, buf.getvalue())

    # checkpoint (without the trailing SHA-256: the target appends it).
    payload = struct.pack("<4f", 1.0, -2.0, 0.5, 3.0) + struct.pack("<2q", 7, -1)
    header = json.dumps({
        "step": 12, "net": "lenet", "config_toml": "[model]\nname = \"lenet\"\n",
        "tensors": [
            {"name": "params", "dtype": "f32", "shape": [2, 2], "offset": 0, "nbytes": 16},
            {"name": "compressor/worker0/residual", "dtype": "i64", "shape": [2], "offset": 16,
             "nbytes": 16},
            {"name": "log/loss_sum", "dtype": "f32", "shape": [], "offset": 0, "nbytes": 4}]},
        separators=(",", ":")).encode()
    write("checkpoint", "two_tensors",
          b"TGCKPT\0\1" + struct.pack("<Q", len(header)) + header + payload)

    # store: a start-up record as ProcessGroup writes it.
    write("store", "hello", json.dumps({
        "world_size": 2, "backend": "gloo", "start_step": 0, "gpu": "",
        "config": "[model]\nname = \"lenet\"\n[train]\nlr = 0.01\n", "host": "node1",
        "cpus": "0,1,2,3"}))

    # ternary / baseline: flags, layout, step, workers, meta floats, message bytes.
    for flags in (0, 1, 2, 3, 5, 16):
        write("ternary", "flags%d" % flags,
              bytes([flags, 2, 9, 17, 3, 2]) + struct.pack("<2f", 0.5, 1.25) +
              bytes(rng.randrange(256) for _ in range(16)))
    # radix sums: levels, offset, trim of the last word, garbage words
    write("ternary", "sum_radix", bytes([0x80]) + struct.pack("<II", 15, 7) + bytes([3]) +
          bytes(rng.randrange(256) for _ in range(32)))
    for flags in range(4):
        write("baseline", "method%d" % flags,
              bytes([flags, 3, 8, 2, 9, 20, 1, 2]) + bytes(rng.randrange(256) for _ in range(120)))


if __name__ == "__main__":
    main()

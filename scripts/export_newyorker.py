#!/usr/bin/env python3
"""export_newyorker.py: exports the Hugging Face `jmhessel/newyorker_caption_contest` dataset
(config `matching`) to JPEG files + JSON Lines manifests that bt reads.

For users who have the `datasets` library and the dataset in their HF cache (or network
access to the Hub); bt itself never needs Python. Usage:

    python3 scripts/export_newyorker.py --out data/newyorker [--config matching]
            [--splits train validation test] [--quality 95]

Writes, per split, OUT/<split>.jsonl with one record per example:
    {"id": "<instance_id>", "image": "images/<contest_number>.jpg",
     "image_description": "...", "caption_choices": [5 strings], "label": 0..4}
and OUT/images/<contest_number>.jpg once per cartoon (the set repeats ~700 cartoons over
thousands of records, so images are deduplicated by contest number). `label` is the index
of the correct choice (the dataset's letter label "A".."E" mapped to 0..4). Records whose
image cannot be saved are reported and skipped; the script exits non-zero if any were.
"""
import argparse
import json
import os
import sys


def letter_to_index(label):
    if isinstance(label, int):
        return label
    label = str(label).strip().upper()
    if len(label) == 1 and "A" <= label <= "E":
        return ord(label) - ord("A")
    raise ValueError(f"label {label!r} is not one of A..E")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--config", default="matching", help="dataset config (default: matching)")
    ap.add_argument("--splits", nargs="+", default=["train", "validation", "test"])
    ap.add_argument("--quality", type=int, default=95, help="JPEG quality of exported images")
    args = ap.parse_args()

    try:
        from datasets import load_dataset
    except ImportError:
        sys.exit("export_newyorker.py needs the `datasets` library (pip install datasets)")

    os.makedirs(os.path.join(args.out, "images"), exist_ok=True)
    failures = 0
    for split in args.splits:
        ds = load_dataset("jmhessel/newyorker_caption_contest", args.config, split=split)
        manifest = os.path.join(args.out, f"{split}.jsonl")
        tmp = manifest + ".tmp"
        written = 0
        with open(tmp, "w", encoding="utf-8") as f:
            for i, ex in enumerate(ds):
                rel = f"images/{ex['contest_number']}.jpg"
                path = os.path.join(args.out, rel)
                try:
                    if not os.path.exists(path):
                        ex["image"].convert("RGB").save(path, "JPEG", quality=args.quality)
                    record = {
                        "id": ex.get("instance_id", f"{split}-{i}"),
                        "image": rel,
                        "image_description": ex["image_description"],
                    }
                    if "caption_choices" in ex and ex["caption_choices"] is not None:
                        record["caption_choices"] = list(ex["caption_choices"])
                        record["label"] = letter_to_index(ex["label"])
                except (OSError, KeyError, ValueError) as e:
                    print(f"{split} record {i}: skipped: {e}", file=sys.stderr)
                    failures += 1
                    continue
                f.write(json.dumps(record, ensure_ascii=False) + "\n")
                written += 1
        os.replace(tmp, manifest)
        print(f"{manifest}: {written} records")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""export_newyorker.py: exports the Hugging Face `jmhessel/newyorker_caption_contest` dataset
(config `matching`) to image files + JSON Lines manifests that bt reads (docs/newyorker.md).

For users who have the `datasets` library and the dataset in their HF cache (or network
access to the Hub); bt itself never needs Python. Usage:

    python3 scripts/export_newyorker.py --out data/newyorker [--config matching]
            [--splits train validation test]

Writes, per split, OUT/<split>.jsonl with one record per example:
    {"id": "<instance_id>", "image": "images/<contest_number>.<ext>", "contest_number": N,
     "image_description": "...", "caption_choices": [5 strings], "label": 0..4}
and OUT/images/<contest_number>.<ext> once per cartoon (the set repeats ~700 cartoons over
thousands of records, so images are deduplicated by contest number). `label` is the index
of the correct choice (the dataset's letter "A".."E" mapped to 0..4). bt trains on
`image_description` (--caption-key image_description / data.caption_column).

Images keep the bytes the dataset stores: the image column is read with
`Image(decode=False)`, so a PNG cartoon is written as <n>.png and a JPEG one as <n>.jpg,
byte for byte (no decode, no re-encode, no Pillow). bt then decodes exactly the file that
BridgeTowerProcessor's PIL would have opened, so the pixels are the reference run's. The
extension comes from the bytes (JPEG, PNG or WebP; anything else is a bad row).

The conversion (convert_rows / export_split) takes any iterable of rows shaped like the
dataset's `matching` config, so it is tested without `datasets`
(tests/test_export_newyorker.py). The `image` of a row may be
  - a dict {"bytes": b"...", "path": ...} (what `datasets` yields with decode=False and what
    its parquet files hold), or the bytes themselves: written unchanged;
  - a decoded PIL image (rows from a dataset loaded without decode=False): its original
    bytes are gone, so it is converted to RGB (PIL's convert("RGB"), what the processor
    does) and saved as PNG, which is lossless: bt reads back the same RGB pixels.
Bad rows (missing column, a label outside A..E, not exactly 5 choices, an image that is not
JPEG/PNG/WebP) are reported as "<split> record <i> (<instance_id>): <problem>" and skipped;
the script exits 1 when any were. Files are written to a temporary name and renamed.
"""
import argparse
import io
import json
import os
import sys

N_CHOICES = 5
JPEG_MAGIC = b"\xff\xd8\xff"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def letter_to_index(label, n_choices=N_CHOICES):
    """'A'..'E' (any case, surrounding spaces allowed) or an int 0..4 -> 0..4."""
    if isinstance(label, bool):
        raise ValueError(f"label {label!r} is not one of A..E")
    if isinstance(label, int):
        index = label
    else:
        text = str(label).strip().upper()
        if len(text) != 1 or not "A" <= text <= "Z":
            raise ValueError(f"label {label!r} is not one of A..E")
        index = ord(text) - ord("A")
    if not 0 <= index < n_choices:
        raise ValueError(f"label {label!r} is not one of A..{chr(ord('A') + n_choices - 1)}")
    return index


def _write_atomic(path, data):
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def image_extension(data):
    """The file extension for image bytes, from their content: jpg, png or webp."""
    if data[:3] == JPEG_MAGIC:
        return "jpg"
    if data[:8] == PNG_MAGIC:
        return "png"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    raise ValueError(f"image is neither JPEG, PNG nor WebP (starts with {data[:8]!r})")


def image_bytes(image):
    """(bytes, extension) to write for one row's image (see the module docstring)."""
    if isinstance(image, dict):
        data = image.get("bytes")
        if data is None and image.get("path"):
            with open(image["path"], "rb") as f:
                data = f.read()
        if data is None:
            raise ValueError("image dict has neither 'bytes' nor a readable 'path'")
    elif isinstance(image, (bytes, bytearray)):
        data = bytes(image)
    elif hasattr(image, "convert") and hasattr(image, "save"):
        buf = io.BytesIO()
        image.convert("RGB").save(buf, "PNG")
        return buf.getvalue(), "png"
    else:
        raise ValueError(f"image of type {type(image).__name__} is not bytes, a dict with "
                         "'bytes' or a PIL image")
    if not data:
        raise ValueError("image is empty (0 bytes)")
    return data, image_extension(data)


def convert_row(row, index, split, out_dir, saved):
    """One dataset row -> one manifest record (a dict). `saved` maps the contest numbers whose
    image is in out_dir/images to its relative path. Raises ValueError / KeyError / OSError on
    a bad row."""
    for key in ("image", "contest_number", "image_description"):
        if key not in row or row[key] is None:
            raise KeyError(f"column '{key}' is missing")
    contest = row["contest_number"]
    if isinstance(contest, bool) or not isinstance(contest, int) or contest < 0:
        raise ValueError(f"contest_number {contest!r} is not a non-negative integer")
    description = row["image_description"]
    if not isinstance(description, str) or not description.strip():
        raise ValueError("image_description is not a non-empty string")
    if contest in saved:
        rel = saved[contest]
    else:
        data, ext = image_bytes(row["image"])
        rel = f"images/{contest}.{ext}"
    record = {
        "id": row.get("instance_id") or f"{split}-{index}",
        "image": rel,
        "contest_number": contest,
        "image_description": description,
    }
    choices = row.get("caption_choices")
    if choices is not None:
        if (not isinstance(choices, (list, tuple)) or len(choices) != N_CHOICES
                or not all(isinstance(c, str) for c in choices)):
            raise ValueError(f"caption_choices is not a list of {N_CHOICES} strings "
                             f"(got {type(choices).__name__}"
                             f"{' of ' + str(len(choices)) if isinstance(choices, (list, tuple)) else ''})")
        record["caption_choices"] = list(choices)
        if row.get("label") is not None:
            record["label"] = letter_to_index(row["label"])
    elif row.get("label") is not None:
        raise ValueError("label without caption_choices")
    if contest not in saved:
        _write_atomic(os.path.join(out_dir, rel), data)
        saved[contest] = rel
    return record


def convert_rows(rows, out_dir, split, log=sys.stderr, saved=None):
    """Converts an iterable of `matching`-config rows. Writes the images under
    out_dir/images and returns (records, n_failed); each bad row is reported on `log`."""
    os.makedirs(os.path.join(out_dir, "images"), exist_ok=True)
    saved = {} if saved is None else saved
    records, failed = [], 0
    for i, row in enumerate(rows):
        try:
            records.append(convert_row(row, i, split, out_dir, saved))
        except (OSError, KeyError, ValueError) as e:
            name = row.get("instance_id") if isinstance(row, dict) else None
            msg = e.args[0] if isinstance(e, KeyError) and e.args else e
            print(f"{split} record {i}{f' ({name})' if name else ''}: skipped: {msg}", file=log)
            failed += 1
    return records, failed


def write_manifest(path, records):
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def export_split(rows, out_dir, split, log=sys.stderr, saved=None):
    """convert_rows + OUT/<split>.jsonl. Returns (records written, rows failed)."""
    records, failed = convert_rows(rows, out_dir, split, log, saved)
    manifest = os.path.join(out_dir, f"{split}.jsonl")
    write_manifest(manifest, records)
    print(f"{manifest}: {len(records)} records"
          f"{f', {failed} skipped' if failed else ''}", file=log)
    return len(records), failed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--config", default="matching", help="dataset config (default: matching)")
    ap.add_argument("--splits", nargs="+", default=["train", "validation", "test"])
    args = ap.parse_args()

    try:
        from datasets import Image, load_dataset
    except ImportError:
        sys.exit("export_newyorker.py needs the `datasets` library (pip install datasets)")

    failures = 0
    saved = {}
    for split in args.splits:
        ds = load_dataset("jmhessel/newyorker_caption_contest", args.config, split=split)
        # The stored bytes, not a decoded PIL image: PNG stays PNG, JPEG stays JPEG.
        ds = ds.cast_column("image", Image(decode=False))
        _, failed = export_split(ds, args.out, split, sys.stdout, saved)
        failures += failed
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()

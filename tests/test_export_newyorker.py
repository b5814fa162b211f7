#!/usr/bin/env python3
"""test_export_newyorker.py: the conversion logic of scripts/export_newyorker.py on rows
shaped like the Hugging Face `jmhessel/newyorker_caption_contest` `matching` config
(image, contest_number, image_location, image_description, image_uncanny_description,
entities, questions, caption_choices (5 strings), from_description, label "A".."E",
n_tokens_label, instance_id), without the `datasets` library: python3 stdlib only.

Usage (meson passes the paths): test_export_newyorker.py SCRIPT JPEG_A JPEG_B [BT_DATA]

Checked, against values written here by hand:
  - every image form the dataset yields: {"bytes", "path"} dicts (parquet / decode=False),
    raw bytes, and a PIL-like object (convert("RGB") then save(.., "PNG"): lossless);
    JPEG and PNG bytes (the dataset holds both) are written unchanged, byte for byte, under
    the extension of their content (.jpg / .png, whatever the row's path says);
  - images deduplicated by contest number: the first row's image is kept;
  - label letters (any case) -> 0..4; the manifest lines, key by key;
  - bad rows are skipped and reported naming split, row index and instance id: a label F,
    4 choices, a missing image_description, bytes that are no image, label without choices;
  - the manifest is one JSON object per line and, when BT_DATA is given, `bt-data check
    --caption-key image_description` reads every record and decodes every JPEG; a PNG it
    cannot decode is tolerated only when bt's message names it as PNG (a build without the
    PNG decoder of issue 22 part 1); any other problem fails.
Exit 0 pass, 1 fail (every failed check printed)."""
import importlib.util
import io
import json
import os
import struct
import subprocess
import sys
import tempfile
import zlib

failures = []


def check(ok, what):
    print(f"{'ok' if ok else 'not ok'} - {what}")
    if not ok:
        failures.append(what)


def load_script(path):
    spec = importlib.util.spec_from_file_location("export_newyorker", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def png_bytes(w, h, grey):
    """A valid 8-bit PNG (greyscale or RGB) of a gradient, made with the stdlib: the scanned
    cartoons of the dataset are greyscale PNGs like this one."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(
            ">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    ch = 1 if grey else 3
    raw = b"".join(b"\0" + bytes((x * 7 + y * 3 + c * 50) % 256 for x in range(w) for c in range(ch))
                   for y in range(h))
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 0 if grey else 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw))
            + chunk(b"IEND", b""))


class FakePIL:
    """Stands in for a decoded PIL.Image: records the calls, writes the given bytes."""

    def __init__(self, data):
        self.data, self.calls = data, []

    def convert(self, mode):
        self.calls.append(("convert", mode))
        return self

    def save(self, fp, fmt, **kw):
        self.calls.append(("save", fmt, kw))
        fp.write(self.data)


def row(contest, desc, choices, label, iid, image):
    return {
        "image": image, "contest_number": contest, "image_location": "a room",
        "image_description": desc, "image_uncanny_description": "odd",
        "entities": ["https://en.wikipedia.org/wiki/Cat"], "questions": ["why?"],
        "caption_choices": choices, "from_description": "scene: ...", "label": label,
        "n_tokens_label": 1, "instance_id": iid,
    }


def main():
    if len(sys.argv) not in (4, 5):
        sys.exit("usage: test_export_newyorker.py SCRIPT JPEG_A JPEG_B [BT_DATA]")
    mod = load_script(sys.argv[1])
    jpeg_a = open(sys.argv[2], "rb").read()
    jpeg_b = open(sys.argv[3], "rb").read()
    bt_data = sys.argv[4] if len(sys.argv) == 5 else None
    check(jpeg_a[:3] == b"\xff\xd8\xff" and jpeg_b[:3] == b"\xff\xd8\xff" and jpeg_a != jpeg_b,
          "two distinct JPEG inputs")

    ch = [f"caption {k}" for k in range(5)]
    png_grey, png_rgb = png_bytes(40, 30, True), png_bytes(33, 17, False)
    fake = FakePIL(png_rgb)
    rows = [
        row(101, "A cat at a desk.", ch, "C", "i0", {"bytes": jpeg_a, "path": "101.jpeg"}),
        row(101, "The same cartoon, another row.", ch[::-1], "a", "i1",
            {"bytes": jpeg_b, "path": None}),             # same contest: image not rewritten
        row(102, "Two fish in a bar.", ch, "e", "i2", jpeg_b),   # raw bytes
        row(103, "A knight on a phone.", ch, " B ", "i3", fake),  # PIL-like
        row(104, "bad label", ch, "F", "i4", jpeg_a),
        row(105, "four choices", ch[:4], "A", "i5", jpeg_a),
        {k: v for k, v in row(106, "x", ch, "A", "i6", jpeg_a).items() if k != "image_description"},
        row(107, "not an image", ch, "A", "i7", {"bytes": b"this is not an image", "path": None}),
        row(108, "label alone", None, "A", "i8", jpeg_a),
        row(109, "No choices: a caption-only record.", None, None, "", jpeg_a),
        row(110, "A scanned cartoon.", ch, "D", "i10", {"bytes": png_grey, "path": "110.jpg"}),
        row(111, "A colour one.", ch, "A", "i11", png_rgb),
    ]
    with tempfile.TemporaryDirectory() as out:
        log = io.StringIO()
        written, failed = mod.export_split(rows, out, "validation", log=log)
        report = log.getvalue()
        print(report, end="")
        check(written == 7 and failed == 5, f"7 rows written, 5 skipped (got {written}, {failed})")
        lines = open(os.path.join(out, "validation.jsonl"), encoding="utf-8").read().splitlines()
        got = [json.loads(x) for x in lines]
        want = [
            {"id": "i0", "image": "images/101.jpg", "contest_number": 101,
             "image_description": "A cat at a desk.", "caption_choices": ch, "label": 2},
            {"id": "i1", "image": "images/101.jpg", "contest_number": 101,
             "image_description": "The same cartoon, another row.", "caption_choices": ch[::-1],
             "label": 0},
            {"id": "i2", "image": "images/102.jpg", "contest_number": 102,
             "image_description": "Two fish in a bar.", "caption_choices": ch, "label": 4},
            {"id": "i3", "image": "images/103.png", "contest_number": 103,
             "image_description": "A knight on a phone.", "caption_choices": ch, "label": 1},
            {"id": "validation-9", "image": "images/109.jpg", "contest_number": 109,
             "image_description": "No choices: a caption-only record."},
            {"id": "i10", "image": "images/110.png", "contest_number": 110,
             "image_description": "A scanned cartoon.", "caption_choices": ch, "label": 3},
            {"id": "i11", "image": "images/111.png", "contest_number": 111,
             "image_description": "A colour one.", "caption_choices": ch, "label": 0},
        ]
        check(got == want, "manifest records equal the expected ones, in order")
        if got != want:
            for g, w in zip(got, want):
                if g != w:
                    print(f"  got  {g}\n  want {w}")
        img = lambda n: open(os.path.join(out, "images", n), "rb").read()
        check(img("101.jpg") == jpeg_a, "images/101.jpg is the first row's JPEG, byte for byte")
        check(img("102.jpg") == jpeg_b, "raw JPEG bytes are written unchanged")
        check(img("110.png") == png_grey, "greyscale PNG bytes stay PNG, byte for byte (the "
              "row's path said .jpg: the content decides)")
        check(img("111.png") == png_rgb, "RGB PNG bytes stay PNG, byte for byte")
        check(img("103.png") == png_rgb and fake.calls == [("convert", "RGB"), ("save", "PNG", {})],
              f"a decoded PIL image is converted to RGB and saved as PNG, losslessly (calls "
              f"{fake.calls})")
        check(sorted(os.listdir(os.path.join(out, "images"))) ==
              ["101.jpg", "102.jpg", "103.png", "109.jpg", "110.png", "111.png"],
              "one image per contest, none for skipped rows")
        for needle, what in [("validation record 4 (i4): skipped: label 'F'", "label F"),
                             ("validation record 5 (i5): skipped: caption_choices is not a list "
                              "of 5 strings", "4 choices"),
                             ("validation record 6 (i6): skipped: column 'image_description' is "
                              "missing", "missing column"),
                             ("validation record 7 (i7): skipped: image is neither JPEG, PNG nor "
                              "WebP", "not an image"),
                             ("validation record 8 (i8): skipped: label without caption_choices",
                              "label alone")]:
            check(needle in report, f"report names the bad row: {what}")
        check(not [f for f in os.listdir(out) if ".tmp." in f], "no temporary file left")
        check(mod.letter_to_index("d") == 3 and mod.letter_to_index(4) == 4,
              "letter_to_index: 'd' -> 3, 4 -> 4")
        if bt_data:
            r = subprocess.run([bt_data, "check", "--data", os.path.join(out, "validation.jsonl"),
                                "--caption-key", "image_description"],
                               capture_output=True, text=True)
            problems = [x for x in r.stdout.splitlines() if x.startswith("problem:")]
            unexpected = [x for x in problems if not (".png: " in x and "PNG" in x)]
            check("7 records" in r.stdout and "images: " in r.stdout and not unexpected
                  and (r.returncode == 0) == (not problems),
                  f"bt-data check reads the exported manifest and decodes every JPEG (exit "
                  f"{r.returncode}, {len(problems)} PNG problems of a build without the PNG "
                  f"decoder): {r.stdout.splitlines()[:2]} {unexpected[:2]} {r.stderr.strip()[:300]}")
    print(f"{len(failures)} failed" if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""gen_image_fixtures.py: JPEG fixtures and the expected pixels of the Hugging Face
BridgeTower image processor, for tests/test_image.c.

What it does
  1. Draws deterministic test pictures (smooth gradients + shapes + Gaussian noise, so any
     resampling or colour error shows) and saves them with Pillow as JPEGs of odd sizes:
     landscape, portrait, tiny, smaller-than-288, grayscale 'L', CMYK, progressive, one with
     an EXIF orientation tag, and a panorama whose long side hits the 1333/800 cap (so the
     centre crop has to zero-pad).
  2. Runs an independent reference of BridgeTowerProcessor's image path (transformers v4, slow
     PIL path; docs: shared/design/model.md section 5.1) written here with PIL + numpy:
        decode      Image.open(bytes).convert("RGB")   (grayscale replicated, CMYK via PIL)
        resize      shortest edge -> s, long side capped at int(1333/800*s), int(x+0.5),
                    floor to a multiple of size_divisor (at least size_divisor, as newer
                    versions do; v4 raises on a zero size there), PIL BICUBIC on uint8
        centre crop to crop x crop, zero padding (pad before = ceil(diff/2)) when smaller
        rescale     float32(float64(u8) * (1/255))
        normalize   (x - mean) / std in float32 with the CLIP mean/std
        layout      (3, crop, crop)
  3. Writes tests/fixtures/images/expected.safetensors with, per image <n>:
        <n>.decoded              U8  (H, W, 3)   PIL-decoded RGB
        <n>.resized.<s>          U8  (h, w, 3)   PIL-resized (before the crop)
        <n>.pixel_values.<s>     F32 (3, c, c)   full processor output, for the small sizes
        <n>.pixel_values.<s>.fnv1a64  U8 (8)     FNV-1a 64 hash of the little-endian F32
                                                 bytes of the full output (sizes 288/294,
                                                 whose full arrays would make the fixture
                                                 directory too big)
        <n>.pixel_values.<s>.stride6  F32 (3, ceil(c/6), ceil(c/6))  every 6th row/column
                                                 of that output, for readable diffs
     and a small index.json (image file, sizes, which s each image has) that the C test reads.
     Also writes preprocessor_config_base.json / _large.json (HF field names).

What it deliberately does not do
  - It does not import transformers (not installed here); the reference is re-written from
    the processor's code path as documented in model.md 5.1.
  - It does not apply EXIF orientation: neither does the HF processor (nor Image.open).

Run:  /usr/bin/python3 scripts/gen_image_fixtures.py         (writes tests/fixtures/images)
      /usr/bin/python3 scripts/gen_image_fixtures.py --bench [IMAGE]
            (times the PIL reference on a 1000x800 JPEG, e.g. the one
             `build/tests/bench_image --write-jpeg JPEG` writes, or on any image PIL reads,
             e.g. the PNG / WebP files of `bench_image --write-formats DIR`; for
             docs/benchmarks.md)
Requires Debian's python3-pil and python3-numpy. Output is deterministic for a given
Pillow + libjpeg-turbo; the versions are recorded in the safetensors metadata.
"""
import io
import json
import math
import os
import struct
import sys
import time

import numpy as np
from PIL import Image, ImageDraw, features

SEED = 20240611
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
RESCALE = 1 / 255
SIZE_DIVISOR = 32

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "images")

# Shortest edges with full F32 outputs (small) and with hashed outputs (288 base, 294 large).
# 32 is the tiny test model; 40 (crop 40, resized short side 32) reproduces the large
# model's "flooring makes it smaller than the crop -> zero padding" in miniature; 45 has an
# odd padding difference (45 - 32 = 13), which checks ceil() for the pad before.
SMALL_SIZES = (32, 40, 45)
BIG_SIZES = (288, 294)

# name, width, height, PIL mode, save options, big sizes to store
IMAGES = [
    ("landscape", 333, 211, "RGB", dict(quality=90), (288,)),
    ("portrait", 197, 301, "RGB", dict(quality=85, subsampling=1), (294,)),
    ("tiny", 20, 25, "RGB", dict(quality=95), ()),
    ("small", 150, 100, "RGB", dict(quality=80, subsampling=0), ()),
    ("gray", 150, 113, "L", dict(quality=90), ()),
    ("cmyk", 120, 90, "CMYK", dict(quality=92), ()),
    ("progressive", 256, 171, "RGB", dict(quality=85, progressive=True), ()),
    ("exif", 64, 48, "RGB", dict(quality=90), ()),
    ("panorama", 400, 100, "RGB", dict(quality=85), (288, 294)),
    # 1:1000: the resized width floors at size_divisor (an upscale from 3 columns, fewer
    # than the 5 taps), the height shrinks ~60x (hundreds of taps per output row).
    ("sliver", 3, 3000, "RGB", dict(quality=90), (288,)),
]


def draw_content(w, h, rng):
    """RGB uint8 (h, w, 3): gradients + shapes + noise."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    r = 128 + 100 * np.sin(x / 17.0 + y / 29.0)
    g = 40 + 180 * (x / max(w - 1, 1)) * (y / max(h - 1, 1))
    b = 128 + 90 * np.cos(np.hypot(x - w / 3, y - h / 2) / 11.0)
    img = np.stack([r, g, b], axis=-1)
    pil = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8), "RGB")
    d = ImageDraw.Draw(pil)
    for _ in range(6):
        x0, x1 = sorted(rng.integers(0, w, 2))
        y0, y1 = sorted(rng.integers(0, h, 2))
        col = tuple(int(c) for c in rng.integers(0, 256, 3))
        kind = rng.integers(0, 3)
        if kind == 0:
            d.rectangle([x0, y0, x1, y1], fill=col)
        elif kind == 1:
            d.ellipse([x0, y0, x1, y1], outline=col, width=2)
        else:
            d.line([x0, y0, x1, y1], fill=col, width=1)
    arr = np.asarray(pil).astype(np.float64)
    arr += rng.normal(0.0, 10.0, arr.shape)
    return np.clip(arr + 0.5, 0, 255).astype(np.uint8)


def make_jpeg(name, w, h, mode, opts, rng):
    rgb = Image.fromarray(draw_content(w, h, rng), "RGB")
    if mode == "L":
        im = rgb.convert("L")
    elif mode == "CMYK":
        # Non-trivial K so the CMYK->RGB formula is exercised (PIL's RGB->CMYK sets K = 0).
        c = np.asarray(rgb.convert("CMYK")).copy()
        c[..., 3] = (np.arange(w)[None, :] * 200 // max(w - 1, 1)).astype(np.uint8)
        im = Image.fromarray(c, "CMYK")
    else:
        im = rgb
    buf = io.BytesIO()
    save = dict(opts)
    if name == "exif":
        exif = Image.Exif()
        exif[0x0112] = 6  # orientation: rotate 90 CW to display; ignored by HF and by bt
        save["exif"] = exif.tobytes()
    im.save(buf, "JPEG", **save)
    return buf.getvalue()


def hf_resize_size(h, w, s, divisor):
    """get_resize_output_image_size of BridgeTower (Python float arithmetic)."""
    longer = int(1333 / 800 * s)
    scale = s / min(h, w)
    if h < w:
        nh, nw = s, scale * w
    else:
        nh, nw = scale * h, s
    if max(nh, nw) > longer:
        scale = longer / max(nh, nw)
        nh, nw = scale * nh, scale * nw
    nh, nw = int(nh + 0.5), int(nw + 0.5)
    nh = max(nh // divisor * divisor, divisor)
    nw = max(nw // divisor * divisor, divisor)
    return nh, nw


def hf_center_crop(img, c):
    """transformers.image_transforms.center_crop on (H, W, C), newer (ceil) padding."""
    oh, ow = img.shape[:2]
    top, left = (oh - c) // 2, (ow - c) // 2
    bottom, right = top + c, left + c
    if top >= 0 and bottom <= oh and left >= 0 and right <= ow:
        return img[top:bottom, left:right]
    nh, nw = max(c, oh), max(c, ow)
    new = np.zeros((nh, nw) + img.shape[2:], dtype=img.dtype)
    tp, lp = math.ceil((nh - oh) / 2), math.ceil((nw - ow) / 2)
    new[tp:tp + oh, lp:lp + ow] = img
    top, bottom, left, right = top + tp, bottom + tp, left + lp, right + lp
    return new[max(0, top):min(nh, bottom), max(0, left):min(nw, right)]


def hf_pixel_values(rgb, s, crop=None, divisor=SIZE_DIVISOR):
    crop = s if crop is None else crop
    h, w = rgb.height, rgb.width
    nh, nw = hf_resize_size(h, w, s, divisor)
    resized = np.asarray(rgb.resize((nw, nh), resample=Image.BICUBIC))
    x = hf_center_crop(resized, crop)
    assert x.shape == (crop, crop, 3), x.shape
    x = (x * RESCALE).astype(np.float32)  # uint8 * python float -> float64, then float32
    x = (x - np.array(CLIP_MEAN, np.float32)) / np.array(CLIP_STD, np.float32)
    assert x.dtype == np.float32
    return np.ascontiguousarray(x.transpose(2, 0, 1)), resized


def fnv1a64(data):
    hsh = 0xCBF29CE484222325
    for b in data:
        hsh ^= b
        hsh = (hsh * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return hsh


def write_safetensors(path, tensors, metadata):
    """Minimal safetensors writer: tensors is a list of (name, np.ndarray)."""
    names = {np.dtype(np.uint8): "U8", np.dtype(np.float32): "F32"}
    header, blobs, off = {}, [], 0
    # Widest element type first, so every tensor is naturally aligned in the data section.
    for name, arr in sorted(tensors, key=lambda t: -t[1].dtype.itemsize):
        arr = np.ascontiguousarray(arr)
        raw = arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": names[arr.dtype], "shape": list(arr.shape),
                        "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    header["__metadata__"] = metadata
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for b in blobs:
            f.write(b)
    os.replace(path + ".tmp", path)


def hf_config(shortest_edge):
    return {
        "do_center_crop": True,
        "do_normalize": True,
        "do_pad": True,
        "do_rescale": True,
        "do_resize": True,
        "image_mean": list(CLIP_MEAN),
        "image_processor_type": "BridgeTowerImageProcessor",
        "image_std": list(CLIP_STD),
        "processor_class": "BridgeTowerProcessor",
        "resample": 3,
        "rescale_factor": RESCALE,
        "size": {"shortest_edge": shortest_edge},
        "size_divisor": SIZE_DIVISOR,
    }


def generate():
    os.makedirs(OUT, exist_ok=True)
    rng = np.random.default_rng(SEED)
    tensors, index = [], []
    for name, w, h, mode, opts, big in IMAGES:
        data = make_jpeg(name, w, h, mode, opts, rng)
        fname = name + ".jpg"
        with open(os.path.join(OUT, fname), "wb") as f:
            f.write(data)
        im = Image.open(io.BytesIO(data))
        assert im.mode == mode and im.size == (w, h), (name, im.mode, im.size)
        if name == "progressive":
            assert im.info.get("progressive") or im.info.get("progression"), "not progressive"
        if name == "exif":
            assert im.getexif().get(0x0112) == 6
        rgb = im.convert("RGB")
        dec = np.asarray(rgb)
        tensors.append((name + ".decoded", dec))
        entry = {"name": name, "file": fname, "mode": mode, "width": w, "height": h,
                 "sizes": [], "hashed_sizes": []}
        for s in SMALL_SIZES:
            pv, resized = hf_pixel_values(rgb, s)
            tensors.append((f"{name}.resized.{s}", resized))
            tensors.append((f"{name}.pixel_values.{s}", pv))
            entry["sizes"].append(s)
        for s in big:
            pv, resized = hf_pixel_values(rgb, s)
            tensors.append((f"{name}.resized.{s}", resized))
            hsh = fnv1a64(pv.astype("<f4").tobytes())
            tensors.append((f"{name}.pixel_values.{s}.fnv1a64",
                            np.frombuffer(struct.pack("<Q", hsh), dtype=np.uint8)))
            tensors.append((f"{name}.pixel_values.{s}.stride6",
                            np.ascontiguousarray(pv[:, ::6, ::6])))
            entry["hashed_sizes"].append(s)
        index.append(entry)
    meta = {
        "generator": "scripts/gen_image_fixtures.py",
        "seed": str(SEED),
        "pillow": Image.__version__ if hasattr(Image, "__version__") else "",
        "numpy": np.__version__,
        "libjpeg": str(features.version("jpg")),
        "libjpeg_turbo": str(features.check_feature("libjpeg_turbo")),
        "reference": "BridgeTowerProcessor image path, v4 slow PIL (model.md 5.1)",
    }
    write_safetensors(os.path.join(OUT, "expected.safetensors"), tensors, meta)
    with open(os.path.join(OUT, "index.json"), "w") as f:
        json.dump({"generator": "scripts/gen_image_fixtures.py", "seed": SEED,
                   "size_divisor": SIZE_DIVISOR, "images": index}, f, indent=1)
        f.write("\n")
    for tag, s in (("base", 288), ("large", 294)):
        with open(os.path.join(OUT, f"preprocessor_config_{tag}.json"), "w") as f:
            json.dump(hf_config(s), f, indent=2)
            f.write("\n")
    total = sum(os.path.getsize(os.path.join(OUT, p)) for p in os.listdir(OUT))
    print(f"wrote {len(tensors)} tensors for {len(IMAGES)} images to {OUT} ({total} bytes)")


def bench(path=None, rounds=5):
    """Times the PIL/numpy reference (decode + processor) on a 1000x800 JPEG at 288: the
    bytes bench_image writes (--write-jpeg) when a path is given, else a picture drawn here.
    Best of `rounds` rounds of ~0.25 s; thread CPU time and wall time."""
    if path:
        with open(path, "rb") as f:
            data = f.read()
    else:
        rng = np.random.default_rng(SEED)
        buf = io.BytesIO()
        Image.fromarray(draw_content(1000, 800, rng), "RGB").save(buf, "JPEG", quality=75)
        data = buf.getvalue()
    rows = []
    for label, fn in (
        ("decode only", lambda: Image.open(io.BytesIO(data)).convert("RGB").load()),
        ("decode + preprocess (HF path)", lambda: hf_pixel_values(
            Image.open(io.BytesIO(data)).convert("RGB"), 288)),
        ("decode (PIL draft) + preprocess", lambda: _draft_pipeline(data)),
        ("preprocess only", None),
    ):
        if fn is None:
            decoded = Image.open(io.BytesIO(data)).convert("RGB")
            decoded.load()
            fn = lambda: hf_pixel_values(decoded, 288)  # noqa: E731
        fn()
        best_wall = best_cpu = float("inf")
        for _ in range(rounds):
            n, t0, c0 = 0, time.perf_counter(), time.thread_time()
            while time.perf_counter() - t0 < 0.25:
                fn()
                n += 1
            best_wall = min(best_wall, (time.perf_counter() - t0) / n)
            best_cpu = min(best_cpu, (time.thread_time() - c0) / n)
        rows.append((label, best_wall, best_cpu))
    im = Image.open(io.BytesIO(data))
    print(f"PIL {Image.__version__}, numpy {np.__version__}, {im.width}x{im.height} {im.format} "
          f"{im.mode} ({len(data)} bytes) -> 288, one thread, best of {rounds}")
    print("| step | wall ms/image | CPU ms/image | images/s per core |")
    print("|---|---:|---:|---:|")
    for label, wall, cpu in rows:
        print(f"| {label} | {wall * 1e3:.2f} | {cpu * 1e3:.2f} | {1.0 / cpu:.1f} |")


def _draft_pipeline(data):
    im = Image.open(io.BytesIO(data))
    h, w = hf_resize_size(im.height, im.width, 288, SIZE_DIVISOR)
    im.draft("RGB", (w, h))
    return hf_pixel_values(im.convert("RGB"), 288)


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "--bench":
        bench(sys.argv[2] if len(sys.argv) > 2 else None)
    else:
        generate()

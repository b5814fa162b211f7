#!/usr/bin/python3
"""gen_format_fixtures.py: PNG and WebP fixtures with the RGB pixels Pillow decodes from them,
for tests/test_image_formats.c (and the damaged inputs of tests/test_image_formats_bad.c).

What it does
  1. Draws small deterministic pictures (gen_image_fixtures.draw_content: gradients, shapes,
     noise; odd sizes) and writes them as PNG and WebP files of every kind bt must read:
       PNG   greyscale 1/2/4/8/16-bit (16-bit with values above 255, where Pillow clips),
             greyscale+alpha 8/16, RGB 8/16, RGBA 8/16 (alpha 0 over non-zero colour),
             palette 1/2/4/8-bit, palette with a tRNS byte list and with one transparent
             index, a PLTE shorter than the indices used, grey and RGB with a tRNS colour,
             Adam7 interlaced (RGB 8, palette 2-bit, RGBA 16, 1x1 and 3x2 where passes are
             empty), every filter type, IDAT split in many chunks, ancillary chunks (gAMA,
             iCCP, tEXt, zTXt, an unknown private chunk), APNG with the default image as frame
             0 and APNG whose default image is not part of the animation.
       WebP  lossy RGB, lossy with alpha, lossless RGB, lossless RGBA with exact=True
             (colour kept under alpha 0), animated (Pillow's encoder; and one written here
             whose frame 1 is a rectangle at an offset inside the canvas), and one with
             ICC + EXIF (VP8X).
     Pillow writes what it can; the PNG kinds Pillow cannot write (2/4-bit grey, 16-bit
     colour, Adam7, short PLTE, forced filters) come from the small PNG writer below.
  2. Decodes every file with Pillow, Image.open(f).convert("RGB"), checks the mode Pillow
     opened it in (so a fixture really is the kind it is named after), and stores the bytes:
       <name>.decoded            U8  (H, W, 3)
       <name>.pixel_values.32    F32 (3, 32, 32)  the whole HF processor path (gen_image_
                                                  fixtures.hf_pixel_values), for a few files
     in tests/fixtures/images/formats/expected.safetensors, with index.json listing
     name, file, Pillow mode, size and whether pixel_values exist.
  3. Writes damaged inputs under tests/fixtures/images/formats/bad/: a PNG declaring
     100000 x 100000 pixels (valid chunks), a PNG whose image data carries 16 MiB of extra
     zeros after the last row, a PNG with a 16 MiB iCCP bomb, a lossy WebP whose frame
     header says 16383 x 16383 and an animated WebP whose canvas is 20000 x 20000.
     Truncations and CRC damage are made by the C test from the good files.

Run:  /usr/bin/python3 scripts/gen_format_fixtures.py      (writes tests/fixtures/images/formats)
Requires Debian's python3-pil (9.4, built with libwebp 1.2.4 + webpmux/demux) and python3-numpy
(scripts/install_deps.sh --python). Deterministic for a given Pillow / libwebp / zlib; the
versions are recorded in the safetensors metadata.
"""
import io
import json
import os
import struct
import sys
import warnings
import zlib

import numpy as np
from PIL import Image, PngImagePlugin, features

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_image_fixtures import draw_content, hf_pixel_values, write_safetensors  # noqa: E402

SEED = 20261128
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "images", "formats")


# --- a small PNG writer (the kinds Pillow does not write) -------------------------------------

def chunk(cid, data):
    return struct.pack(">I", len(data)) + cid + data + struct.pack(">I", zlib.crc32(cid + data))


def paeth(a, b, c):
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def filter_row(ftype, row, prev, bpp):
    out = bytearray(len(row))
    for i, x in enumerate(row):
        a = row[i - bpp] if i >= bpp else 0
        b = prev[i] if prev is not None else 0
        c = prev[i - bpp] if prev is not None and i >= bpp else 0
        pred = (0, a, b, (a + b) // 2, paeth(a, b, c))[ftype]
        out[i] = (x - pred) & 0xFF
    return bytes([ftype]) + bytes(out)


def pack_samples(samples, depth):
    """samples: (h, w*channels) ints -> list of row bytes at `depth` bits."""
    rows = []
    for r in samples:
        if depth == 16:
            rows.append(b"".join(struct.pack(">H", int(v)) for v in r))
        elif depth == 8:
            rows.append(bytes(int(v) for v in r))
        else:
            per = 8 // depth
            b = bytearray((len(r) + per - 1) // per)
            for i, v in enumerate(r):
                b[i // per] |= int(v) << (8 - depth * (i % per + 1))
            rows.append(bytes(b))
    return rows


ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2),
         (0, 1, 1, 2))


def png_bytes(arr, color, depth, palette=None, trns=None, interlace=False, filters=None,
              idat_split=None, extra_chunks=(), extra_idat=b""):
    """arr: (h, w, channels) ints. Rows filtered with filters[i % len] (default: cycle 0-4)."""
    h, w, ch = arr.shape
    bpp = max(1, ch * depth // 8)
    filters = filters or (0, 1, 2, 3, 4)
    raw, k = b"", 0
    passes = ADAM7 if interlace else ((0, 0, 1, 1),)
    for x0, y0, dx, dy in passes:
        sub = arr[y0::dy, x0::dx]
        if sub.size == 0:
            continue
        prev = None
        for row in pack_samples(sub.reshape(sub.shape[0], -1), depth):
            raw += filter_row(filters[k % len(filters)], row, prev, bpp)
            prev = row
            k += 1
    if extra_idat:
        # The same zlib stream goes on past the last row with `extra_idat` more bytes.
        co = zlib.compressobj(9)
        z = co.compress(raw) + co.compress(extra_idat) + co.flush()
    else:
        z = zlib.compress(raw, 9)
    out = b"\x89PNG\r\n\x1a\n"
    out += chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, color, 0, 0, 1 if interlace else 0))
    for cid, data in extra_chunks:
        out += chunk(cid, data)
    if palette is not None:
        out += chunk(b"PLTE", bytes(np.asarray(palette, np.uint8).reshape(-1)))
    if trns is not None:
        out += chunk(b"tRNS", trns)
    step = idat_split or len(z)
    for i in range(0, len(z), step):
        out += chunk(b"IDAT", z[i:i + step])
    return out + chunk(b"IEND", b"")


# --- the fixtures ------------------------------------------------------------------------------

def pil_png(im, **opts):
    buf = io.BytesIO()
    im.save(buf, "PNG", **opts)
    return buf.getvalue()


def pil_webp(im, **opts):
    buf = io.BytesIO()
    im.save(buf, "WEBP", **opts)
    return buf.getvalue()


def riff_chunk(fourcc, data):
    return fourcc + struct.pack("<I", len(data)) + data + (b"\0" if len(data) % 2 else b"")


def webp_offset_animation(rng):
    """An animation on a 29x21 canvas whose frame 1 is a 16x12 lossless rectangle at (6, 4):
    Pillow's (libwebp's WebPAnimDecoder) frame 1 is black outside it, whatever the ANIM
    background colour (white here, a hint that the decoder does not apply)."""
    small = pil_webp(Image.fromarray(draw_content(16, 12, rng), "RGB"), lossless=True)
    assert small[12:16] == b"VP8L", small[:16]
    frame = small[12:]  # the whole VP8L chunk (header + data + padding)

    def u24(v):
        return v.to_bytes(3, "little")

    def anmf(x, y, w, h):
        return riff_chunk(b"ANMF", u24(x // 2) + u24(y // 2) + u24(w - 1) + u24(h - 1)
                          + u24(100) + b"\0" + frame)

    body = b"WEBP" + riff_chunk(b"VP8X", bytes([0x02, 0, 0, 0]) + u24(28) + u24(20))
    body += riff_chunk(b"ANIM", bytes([255, 255, 255, 255]) + struct.pack("<H", 0))
    body += anmf(6, 4, 16, 12) + anmf(12, 8, 16, 12)
    return b"RIFF" + struct.pack("<I", len(body)) + body


def make_fixtures(rng):
    """[(name, file bytes, extension, Pillow mode expected, store pixel_values)]."""
    W, H = 29, 21
    rgb = draw_content(W, H, rng)
    grey = np.asarray(Image.fromarray(rgb, "RGB").convert("L"))
    alpha = ((np.arange(W)[None, :] * 7 + np.arange(H)[:, None] * 13) % 256).astype(np.uint8)
    alpha[:4, :4] = 0  # fully transparent corner over non-zero colour
    rgba = np.dstack([rgb, alpha])
    la = np.dstack([grey, alpha])
    fx = []

    def add(name, data, ext, mode, pv=False):
        fx.append((name, data, ext, mode, pv))

    # Greyscale.
    add("grey1", pil_png(Image.fromarray(grey > 128).convert("1")), "png", "1")
    for d in (2, 4):
        add(f"grey{d}", png_bytes((grey >> (8 - d))[..., None], 0, d), "png", "L")
    add("grey8", pil_png(Image.fromarray(grey, "L")), "png", "L")
    g16 = (grey.astype(np.uint32) * 600 // 255 + rng.integers(0, 3, grey.shape)).astype(np.uint32)
    g16[0, :] = np.linspace(0, 65535, W).astype(np.uint32)  # and some far above 255
    add("grey16", png_bytes(g16[..., None], 0, 16), "png", "I")
    add("grey8_trns", png_bytes(grey[..., None], 0, 8, trns=struct.pack(">H", int(grey[3, 3]))),
        "png", "L")
    # Greyscale + alpha.
    add("greyalpha8", pil_png(Image.fromarray(la, "LA")), "png", "LA")
    def u16(a8):  # high byte a8, random low byte: the low byte must not matter
        return (a8.astype(np.uint32) << 8) | rng.integers(0, 256, a8.shape).astype(np.uint32)

    add("greyalpha16", png_bytes(u16(la), 4, 16), "png", "RGBA")
    # Truecolour.
    add("rgb8", pil_png(Image.fromarray(rgb, "RGB")), "png", "RGB", True)
    add("rgb16", png_bytes(u16(rgb), 2, 16),
        "png", "RGB")
    add("rgb8_trns", png_bytes(rgb, 2, 8, trns=struct.pack(">HHH", *(int(v) for v in rgb[5, 5]))),
        "png", "RGB")
    add("rgba8", pil_png(Image.fromarray(rgba, "RGBA")), "png", "RGBA")
    add("rgba16", png_bytes(u16(rgba), 6, 16),
        "png", "RGBA")
    # Palette.
    pal = rng.integers(0, 256, (256, 3))
    for d in (1, 2, 4, 8):
        idx = rng.integers(0, 1 << d, (H, W))
        add(f"palette{d}", png_bytes(idx[..., None], 3, d, palette=pal[:1 << d]), "png", "P")
    idx8 = rng.integers(0, 256, (H, W))
    add("palette8_trns_list", png_bytes(idx8[..., None], 3, 8, palette=pal,
                                        trns=bytes(rng.integers(0, 256, 200).astype(np.uint8))),
        "png", "P")
    p_im = Image.fromarray(rgb, "RGB").quantize(64)
    add("palette8_trns_index", pil_png(p_im, transparency=5), "png", "P")
    # Indices past a 6-entry PLTE: Pillow maps them to its initial ramp (i, i, i).
    add("palette8_short_plte", png_bytes(idx8[..., None], 3, 8, palette=pal[:6]), "png", "P")
    # Adam7.
    add("adam7_rgb8", png_bytes(rgb, 2, 8, interlace=True), "png", "RGB", True)
    add("adam7_palette2", png_bytes(rng.integers(0, 4, (H, W))[..., None], 3, 2, palette=pal[:4],
                                    interlace=True), "png", "P")
    add("adam7_rgba16", png_bytes(u16(rgba), 6, 16, interlace=True), "png",
        "RGBA")
    add("adam7_1x1", png_bytes(rgb[:1, :1], 2, 8, interlace=True), "png", "RGB")
    add("adam7_3x2", png_bytes(rgb[:2, :3], 2, 8, interlace=True), "png", "RGB")
    # Filters, chunking, ancillary chunks.
    for f in range(5):
        add(f"filter{f}", png_bytes(rgb, 2, 8, filters=(f,)), "png", "RGB")
    add("idat_split", png_bytes(rgb, 2, 8, idat_split=97), "png", "RGB")
    icc = zlib.compress(b"\0" * 4000)
    add("ancillary", png_bytes(rgb, 2, 8, extra_chunks=(
        (b"gAMA", struct.pack(">I", 100000)),  # gamma 1.0: Pillow ignores it in convert()
        (b"iCCP", b"fake\0\0" + icc),
        (b"tEXt", b"Comment\0bt fixture"),
        (b"zTXt", b"Note\0\0" + zlib.compress(b"compressed text")),
        (b"prVt", b"private chunk, unknown to every decoder"))), "png", "RGB")
    # APNG: default image = frame 0; and a default image outside the animation (Pillow's
    # frame 0 is still the IDAT image).
    frames = [Image.fromarray(draw_content(W, H, rng), "RGB") for _ in range(2)]
    add("apng", pil_png(frames[0], save_all=True, append_images=frames[1:], duration=100),
        "png", "RGB")
    add("apng_default_image", pil_png(Image.fromarray(rgb, "RGB"), save_all=True,
                                      append_images=frames, default_image=True, duration=100),
        "png", "RGB")

    # WebP.
    add("webp_lossy", pil_webp(Image.fromarray(rgb, "RGB"), quality=80), "webp", "RGB", True)
    add("webp_lossy_alpha", pil_webp(Image.fromarray(rgba, "RGBA"), quality=70), "webp", "RGBA")
    add("webp_lossless", pil_webp(Image.fromarray(rgb, "RGB"), lossless=True), "webp", "RGB")
    add("webp_lossless_alpha", pil_webp(Image.fromarray(rgba, "RGBA"), lossless=True, exact=True),
        "webp", "RGBA")
    exif = Image.Exif()
    exif[0x0112] = 6
    add("webp_icc_exif", pil_webp(Image.fromarray(rgb, "RGB"), quality=85, icc_profile=b"x" * 64,
                                  exif=exif.tobytes()), "webp", "RGB")
    # Animated (Pillow's encoder makes frame 1 the whole canvas; frames 2-3 differ only in
    # part, so they are stored as smaller rectangles that frame 1's decode must not see).
    base = Image.fromarray(rgb, "RGB")
    f2 = base.copy()
    f2.paste((255, 0, 0), (5, 5, 15, 12))
    f3 = base.copy()
    f3.paste((0, 0, 255), (20, 10, 30, 20))
    add("webp_animated", pil_webp(base, save_all=True, append_images=[f2, f3], duration=50,
                                  quality=75), "webp", "RGB")
    add("webp_animated_offset", webp_offset_animation(rng), "webp", "RGB")
    add("webp_animated_lossless", pil_webp(Image.fromarray(rgba, "RGBA"), save_all=True,
                                           append_images=[f2.convert("RGBA")], lossless=True,
                                           duration=50), "webp", "RGBA")
    # A bigger image for the preprocessing path (resize 97x61 -> 50x32, crop 32).
    big = draw_content(97, 61, rng)
    add("rgb8_97x61", pil_png(Image.fromarray(big, "RGB")), "png", "RGB", True)
    add("webp_lossy_97x61", pil_webp(Image.fromarray(big, "RGB"), quality=90), "webp", "RGB", True)
    return fx


def make_bad(rng):
    """Damaged inputs: [(file name, bytes)]."""
    out = []
    # 100000 x 100000 RGB: valid chunks, tiny IDAT. Must be refused from the header.
    z = zlib.compress(b"\0" * 4096, 9)
    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 100000, 100000, 8, 2,
                                                            0, 0, 0))
           + chunk(b"IDAT", z) + chunk(b"IEND", b""))
    out.append(("bomb_dimensions.png", png))
    # 16 x 16 grey whose zlib stream carries 16 MiB of zeros after the image's rows.
    g = rng.integers(0, 256, (16, 16, 1))
    out.append(("bomb_extra_idat.png", png_bytes(g, 0, 8, filters=(0,),
                                                 extra_idat=b"\0" * (16 << 20))))
    # 16 x 16 grey with an iCCP chunk inflating to 16 MiB.
    out.append(("bomb_iccp.png", png_bytes(g, 0, 8, extra_chunks=(
        (b"iCCP", b"bomb\0\0" + zlib.compress(b"\0" * (16 << 20), 9)),))))
    # Lossy WebP whose VP8 frame header claims 16383 x 16383 (the format's maximum).
    w = bytearray(pil_webp(Image.fromarray(draw_content(16, 16, rng), "RGB"), quality=50))
    assert w[12:16] == b"VP8 " and w[23:26] == b"\x9d\x01\x2a", w[:32]
    w[26:30] = struct.pack("<HH", 16383, 16383)
    out.append(("huge_vp8.webp", bytes(w)))
    # Animated WebP whose canvas (VP8X) is 20000 x 20000, one small frame.
    anim = pil_webp(Image.fromarray(draw_content(16, 16, rng), "RGB"), save_all=True,
                    append_images=[Image.new("RGB", (16, 16))], duration=10, lossless=True)
    a = bytearray(anim)
    assert a[12:16] == b"VP8X", a[:16]
    a[24:27] = (20000 - 1).to_bytes(3, "little")
    a[27:30] = (20000 - 1).to_bytes(3, "little")
    out.append(("huge_canvas.webp", bytes(a)))
    return out


def main():
    # convert("RGB") of a palette image with a tRNS byte list warns that the alpha is dropped:
    # dropping it is the behaviour under test.
    warnings.filterwarnings("ignore", message="Palette images with Transparency")
    os.makedirs(os.path.join(OUT, "bad"), exist_ok=True)
    rng = np.random.default_rng(SEED)
    tensors, index = [], []
    for name, data, ext, mode, pv in make_fixtures(rng):
        fname = f"{name}.{ext}"
        with open(os.path.join(OUT, fname), "wb") as f:
            f.write(data)
        im = Image.open(io.BytesIO(data))
        assert im.format == ext.upper(), (name, im.format)
        assert im.mode == mode, (name, im.mode, mode)
        rgb = im.convert("RGB")
        tensors.append((name + ".decoded", np.asarray(rgb)))
        entry = {"name": name, "file": fname, "mode": mode, "width": im.width,
                 "height": im.height, "pixel_values": [32] if pv else []}
        if pv:
            px, _ = hf_pixel_values(rgb, 32)
            tensors.append((name + ".pixel_values.32", px))
        index.append(entry)
    meta = {
        "generator": "scripts/gen_format_fixtures.py",
        "seed": str(SEED),
        "pillow": Image.__version__,
        "numpy": np.__version__,
        "libwebp": str(features.version("webp")),
        "zlib": str(features.version("zlib")),
        "reference": "Image.open(f).convert('RGB'); pixel_values: hf_pixel_values",
    }
    write_safetensors(os.path.join(OUT, "expected.safetensors"), tensors, meta)
    with open(os.path.join(OUT, "index.json"), "w") as f:
        json.dump({"generator": "scripts/gen_format_fixtures.py", "seed": SEED,
                   "images": index}, f, indent=1)
        f.write("\n")
    for fname, data in make_bad(rng):
        with open(os.path.join(OUT, "bad", fname), "wb") as f:
            f.write(data)
    total = sum(os.path.getsize(os.path.join(dp, p)) for dp, _, fs in os.walk(OUT) for p in fs)
    print(f"wrote {len(index)} images ({len(tensors)} tensors) to {OUT} ({total} bytes)")


if __name__ == "__main__":
    main()

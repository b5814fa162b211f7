/* image_webp.c: WebP bytes -> 8-bit RGB equal to Pillow's Image.open(f).convert("RGB")
 * (Debian's Pillow 9.4 on libwebp 1.2.4; fixtures in tests/fixtures/images/formats check it).
 *
 * Pillow built with libwebpmux/demux (Debian's is: _webp.HAVE_WEBPANIM) opens every WebP, still
 * or animated, through libwebp's WebPAnimDecoder with its default options (MODE_RGBA, not
 * premultiplied, fancy upsampling, no threads) and takes the first frame: the canvas after
 * frame 1 (a key frame: the canvas is cleared to transparent black (0, 0, 0, 0), then the frame
 * is decoded into its rectangle). convert("RGB") drops the alpha byte without compositing.
 * Here an animation goes through the same calls (a pixel outside frame 1's rectangle is
 * (0, 0, 0), as in Pillow); a still image (lossy VP8, lossless VP8L, with alpha (ALPH),
 * extended VP8X) is decoded by WebPDecode straight to RGB, which gives the same bytes (see
 * webp_still) without the animation decoder's two RGBA canvases (8 bytes per pixel) and the
 * copy. Both paths first pass the demuxer, as Pillow's does, so the same files are accepted.
 *
 * The canvas size (VP8X, or the bitstream's for a simple file) is read by WebPGetFeatures and
 * checked against IMAGE_MAX_PIXELS before the demuxer or decoder allocates anything of that
 * size. Truncated or corrupt data is an error (WebPDemux rejects an incomplete RIFF, the VP8
 * and VP8L decoders report premature ends and bad bitstreams).
 *
 * Deliberately not here: frames after the first, ICC profiles, EXIF orientation (the HF
 * processor applies none). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <webp/decode.h>
#include <webp/demux.h>

#include "data/image_codec.h"
#include "mem.h"

static const char *webp_status_text(VP8StatusCode s) {
    switch (s) {
    case VP8_STATUS_OUT_OF_MEMORY: return "out of memory";
    case VP8_STATUS_INVALID_PARAM: return "invalid parameter";
    case VP8_STATUS_BITSTREAM_ERROR: return "bitstream error (corrupt or not WebP)";
    case VP8_STATUS_UNSUPPORTED_FEATURE: return "unsupported feature";
    case VP8_STATUS_SUSPENDED: return "suspended";
    case VP8_STATUS_USER_ABORT: return "aborted";
    case VP8_STATUS_NOT_ENOUGH_DATA: return "not enough data (truncated)";
    default: return "unknown error";
    }
}

/* A still image (VP8, VP8L, or VP8X without ANIM): decoded straight to RGB. The animation
 * decoder would decode the one frame into an RGBA canvas of the same size with the same
 * options (fancy upsampling, no dithering, not premultiplied), whose RGB bytes are these:
 * libwebp's RGB and RGBA output paths share the YUV->RGB upsampler and the ARGB unpacking and
 * differ only in writing the alpha byte. */
static bt_status webp_still(uint8_t *px, const uint8_t *bytes, size_t n,
                            const WebPBitstreamFeatures *f, const char *name) {
    WebPDecoderConfig cfg;
    if (!WebPInitDecoderConfig(&cfg))
        return bt_fail(BT_ERR_UNSUPPORTED, "%s: libwebp decoder ABI mismatch", name);
    cfg.output.colorspace = MODE_RGB;
    cfg.output.is_external_memory = 1;
    cfg.output.u.RGBA.rgba = px;
    cfg.output.u.RGBA.stride = f->width * 3;
    cfg.output.u.RGBA.size = (size_t)f->width * (size_t)f->height * 3;
    VP8StatusCode vs = WebPDecode(bytes, n, &cfg);
    WebPFreeDecBuffer(&cfg.output);
    if (vs != VP8_STATUS_OK)
        return bt_fail(vs == VP8_STATUS_OUT_OF_MEMORY ? BT_ERR_NOMEM : BT_ERR_FORMAT,
                       "%s: corrupt or truncated WebP: cannot decode the %s image data (%d x "
                       "%d): %s", name, f->format == 2 ? "lossless" : "lossy", f->width,
                       f->height, webp_status_text(vs));
    return BT_OK;
}

/* An animation: frame 1 through WebPAnimDecoder (default options, MODE_RGBA), as Pillow. */
static bt_status webp_first_frame(uint8_t *px, const WebPData *data,
                                  const WebPBitstreamFeatures *f, const char *name) {
    WebPAnimDecoderOptions opt;
    if (!WebPAnimDecoderOptionsInit(&opt))
        return bt_fail(BT_ERR_UNSUPPORTED, "%s: libwebp demux ABI mismatch", name);
    WebPAnimDecoder *dec = WebPAnimDecoderNew(data, &opt);
    if (!dec)
        return bt_fail(BT_ERR_FORMAT, "%s: corrupt WebP animation: cannot start decoding it",
                       name);
    WebPAnimInfo ai;
    uint8_t *rgba = NULL;
    int ts = 0;
    bt_status st = BT_OK;
    if (!WebPAnimDecoderGetInfo(dec, &ai) || ai.canvas_width != (uint32_t)f->width ||
        ai.canvas_height != (uint32_t)f->height)
        st = bt_fail(BT_ERR_FORMAT, "%s: corrupt WebP animation: inconsistent canvas size",
                     name);
    else if (!WebPAnimDecoderGetNext(dec, &rgba, &ts))
        st = bt_fail(BT_ERR_FORMAT,
                     "%s: corrupt or truncated WebP animation: cannot decode its first frame "
                     "(canvas %d x %d)", name, f->width, f->height);
    else
        for (size_t i = 0, np = (size_t)f->width * (size_t)f->height; i < np; i++)
            memcpy(px + 3 * i, rgba + 4 * i, 3);
    WebPAnimDecoderDelete(dec);
    return st;
}

bt_status image_decode_webp(image_u8 *out, const uint8_t *bytes, size_t n, const char *name) {
    memset(out, 0, sizeof *out);
    WebPBitstreamFeatures f;
    VP8StatusCode vs = WebPGetFeatures(bytes, n, &f);
    if (vs != VP8_STATUS_OK)
        return bt_fail(BT_ERR_FORMAT, "%s: corrupt or truncated WebP (header): %s", name,
                       webp_status_text(vs));
    if (f.width <= 0 || f.height <= 0)
        return bt_fail(BT_ERR_FORMAT, "%s: corrupt WebP: canvas is %d x %d pixels", name,
                       f.width, f.height);
    if ((int64_t)f.width * (int64_t)f.height > IMAGE_MAX_PIXELS)
        return bt_fail(BT_ERR_UNSUPPORTED,
                       "%s: WebP is %d x %d pixels, above the limit of %lld pixels", name,
                       f.width, f.height, (long long)IMAGE_MAX_PIXELS);

    /* Pillow's WebPAnimDecoderNew first runs the demuxer over the whole RIFF container: the
     * same check here, so bt accepts exactly the containers Pillow accepts. */
    WebPData data = {bytes, n};
    WebPDemuxer *dmx = WebPDemux(&data);
    if (!dmx)
        return bt_fail(BT_ERR_FORMAT,
                       "%s: corrupt or truncated WebP: its chunks cannot be parsed (RIFF "
                       "container, %zu bytes)", name, n);
    const uint32_t frames = WebPDemuxGetI(dmx, WEBP_FF_FRAME_COUNT);
    WebPDemuxDelete(dmx);
    if (frames < 1)
        return bt_fail(BT_ERR_FORMAT, "%s: corrupt WebP: no image frame", name);

    const size_t np = (size_t)f.width * (size_t)f.height;
    /* malloc, not bt_alloc: the size comes from the file (bt_free is free). */
    uint8_t *px = malloc(np * 3);
    if (!px)
        return bt_fail(BT_ERR_NOMEM, "%s: out of memory decoding a %d x %d WebP", name, f.width,
                       f.height);
    bt_status st = f.has_animation ? webp_first_frame(px, &data, &f, name)
                                   : webp_still(px, bytes, n, &f, name);
    if (st != BT_OK) {
        free(px);
        return st;
    }
    out->w = out->orig_w = f.width;
    out->h = out->orig_h = f.height;
    out->scale_num = 8;
    out->data = px;
    return BT_OK;
}

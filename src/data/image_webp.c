/* image_webp.c: WebP bytes -> 8-bit RGB equal to Pillow's Image.open(f).convert("RGB")
 * (Debian's Pillow 9.4 on libwebp 1.2.4; fixtures in tests/fixtures/images/formats check it).
 *
 * Pillow built with libwebpmux/demux (Debian's is: _webp.HAVE_WEBPANIM) opens every WebP, still
 * or animated, through libwebp's WebPAnimDecoder with its default options (MODE_RGBA, not
 * premultiplied, fancy upsampling, no threads) and takes the first frame: the canvas after
 * frame 1 (a key frame: the canvas is cleared to transparent black (0, 0, 0, 0), then the frame
 * is decoded into its rectangle). convert("RGB") drops the alpha byte without compositing.
 * This file makes the same calls, so lossy (VP8, YUV 4:2:0 upsampled the same way), lossless
 * (VP8L), with alpha (ALPH), extended (VP8X) and animated (ANIM/ANMF) files give the same
 * bytes; a pixel outside frame 1's rectangle is (0, 0, 0), as in Pillow.
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

    WebPData data = {bytes, n};
    WebPAnimDecoderOptions opt;
    if (!WebPAnimDecoderOptionsInit(&opt))
        return bt_fail(BT_ERR_UNSUPPORTED, "%s: libwebp demux ABI mismatch", name);
    WebPAnimDecoder *dec = WebPAnimDecoderNew(&data, &opt); /* MODE_RGBA, no threads */
    if (!dec)
        return bt_fail(BT_ERR_FORMAT,
                       "%s: corrupt or truncated WebP: its chunks cannot be parsed (RIFF "
                       "container, %zu bytes)", name, n);
    WebPAnimInfo ai;
    uint8_t *rgba = NULL;
    int ts = 0;
    bt_status st = BT_OK;
    if (!WebPAnimDecoderGetInfo(dec, &ai) || ai.frame_count < 1 ||
        ai.canvas_width != (uint32_t)f.width || ai.canvas_height != (uint32_t)f.height)
        st = bt_fail(BT_ERR_FORMAT, "%s: corrupt WebP: inconsistent canvas or no frames", name);
    else if (!WebPAnimDecoderGetNext(dec, &rgba, &ts))
        st = bt_fail(BT_ERR_FORMAT,
                     "%s: corrupt or truncated WebP: cannot decode the image data%s (%d x %d, %s)",
                     name, ai.frame_count > 1 ? " of the first frame" : "", f.width, f.height,
                     f.format == 1 ? "lossy" : f.format == 2 ? "lossless" : "mixed");
    if (st == BT_OK) {
        const size_t np = (size_t)f.width * (size_t)f.height;
        /* malloc, not bt_alloc: the size comes from the file (bt_free is free). */
        uint8_t *px = malloc(np * 3);
        if (!px) {
            st = bt_fail(BT_ERR_NOMEM, "%s: out of memory decoding a %d x %d WebP", name,
                         f.width, f.height);
        } else {
            for (size_t i = 0; i < np; i++) memcpy(px + 3 * i, rgba + 4 * i, 3);
            out->w = out->orig_w = f.width;
            out->h = out->orig_h = f.height;
            out->scale_num = 8;
            out->data = px;
        }
    }
    WebPAnimDecoderDelete(dec);
    return st;
}

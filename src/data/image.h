/* image.h: JPEG, PNG or WebP bytes -> normalized pixel tensors, the way Hugging Face's
 * BridgeTowerProcessor (transformers v4, slow PIL path; shared/design/model.md 5.1) produces
 * `pixel_values`.
 *
 * Pipeline (image_preprocess), per image:
 *   detect      the format from the file's first bytes, never its name (image_decode_for):
 *               JPEG, PNG (libpng, image_png.c) or WebP (libwebp, image_webp.c), each decoded
 *               to exactly Pillow's Image.open(f).convert("RGB") (the PNG and WebP rules are
 *               in those files' top comments); GIF, BMP, TIFF, AVIF, ... are refused by name.
 *   decode      (JPEG) libjpeg-turbo (islow IDCT, fancy upsampling: Pillow's defaults, same
 *               library) to 8-bit RGB. Grayscale is replicated to RGB; 4-component (CMYK/YCCK) files
 *               are treated as Adobe-inverted CMYK and converted with Pillow's CMYK->RGB
 *               formula, i.e. exactly Image.open(f).convert("RGB").
 *   resize      shortest edge -> s, long side capped at int(1333/800*s), each side rounded
 *               with int(x+0.5) then floored to a multiple of size_divisor (at least
 *               size_divisor: v4 would raise on the zero size an extreme aspect ratio gives;
 *               newer versions floor at size_divisor, and so do we). Pillow's BICUBIC
 *               (a = -0.5, antialiased: the support widens by the downscale factor),
 *               horizontal pass then vertical pass on 8-bit data in Pillow's fixed point:
 *               bit-exact with Image.resize(..., BICUBIC) (resample.c).
 *   centre crop to crop_size x crop_size; a side shorter than the crop is zero-padded first
 *               (pad before = ceil(diff/2)); padding is raw pixel 0, so it normalizes to
 *               -mean/std (the large model's 288 -> 294 case).
 *   rescale     float32(double(u8) * rescale_factor)
 *   normalize   (x - mean_c) / std_c in float32, written channels-first (3, crop, crop).
 * Without DCT scaling the fp32 output is bit-identical to the HF processor's (both compute
 * the same IEEE operations in the same order).
 *
 * DCT-domain downscaling (config use_dct_scaling, the fast path of the data loader): libjpeg
 * decodes at scale M/8, the smallest M whose output is not smaller than the resize target in
 * either dimension, and the resize then starts from that image. The resize target is always
 * computed from the dimensions stored in the file (image_u8.orig_w/orig_h), so the output
 * shape never changes. The resize maps exactly the picture's extent, orig_w*M/8 scaled pixels
 * (libjpeg rounds the scaled size up, padding the last pixel), onto the target. The pixels
 * differ from the reference by a small low-pass difference (bounded in tests/test_image.c).
 *
 * Errors (bt_status + message naming the file): empty, not JPEG / PNG / WebP (GIF, BMP, TIFF,
 * ... are named), corrupt or truncated data, unsupported component count or precision, images
 * above IMAGE_MAX_PIXELS. Every libjpeg warning (except an unknown JFIF version number, which
 * is metadata only) is an error: libjpeg "recovers" from damaged
 * entropy data or a premature end of file by inventing pixels, and training on invented
 * pixels silently is worse than reporting the file. (Pillow also rejects truncated files by
 * default, but it accepts files whose only damage is warning-level, e.g. extraneous bytes
 * before a marker or a missing EOI; bt rejects those too.)
 *
 * Deliberately not here: EXIF orientation (the HF processor applies none, so neither do we:
 * pixels are used as stored), ICC colour management (Pillow ignores it in convert("RGB")
 * too), image formats other than JPEG, PNG and WebP, batching / pixel_mask (the crop makes
 * every image the same square, so HF's batch padding is a no-op), random augmentation. */
#ifndef BT_DATA_IMAGE_H
#define BT_DATA_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "dtype.h"
#include "status.h"

/* Upper bound on width*height of an image we decode (header dimensions, any format). Protects
 * the loader from a corrupt or hostile header asking for gigabytes (progressive JPEGs need a
 * whole-image coefficient buffer of ~6 bytes per pixel). 8192 x 8192. */
#define IMAGE_MAX_PIXELS ((int64_t)1 << 26)

/* An 8-bit RGB image, rows top to bottom, pixels interleaved R, G, B. */
typedef struct image_u8 {
    int w, h;           /* size of `data` */
    int orig_w, orig_h; /* size stored in the file, before DCT-domain downscaling (== w, h
                           when none); the resize target is computed from these */
    int scale_num;      /* decoded at scale_num/8 of the stored size (8: full size); then
                           w = ceil(orig_w * scale_num / 8), same for h */
    uint8_t *data;      /* (h, w, 3); bt_alloc'd, owned; free with image_u8_free */
} image_u8;

/* Allocates an uninitialized w x h image (orig = w, h, scale_num = 8). */
void image_u8_init(image_u8 *img, int w, int h);
void image_u8_free(image_u8 *img);

typedef struct image_preprocess_config {
    int do_resize;         /* 0: skip the resize (HF do_resize=false) */
    int shortest_edge;     /* size.shortest_edge: 288 base, 294 large, 32 tiny */
    int longest_edge;      /* int(1333/800 * shortest_edge): 479 for 288, 489 for 294 */
    int size_divisor;      /* 32 */
    int crop_size;         /* centre-crop side; HF falls back to shortest_edge */
    int do_rescale;        /* multiply by rescale_factor (else keep 0..255) */
    double rescale_factor; /* 1/255, kept in double as HF multiplies in float64 */
    float mean[3];         /* CLIP mean, as float32 (HF builds a float32 array of it) */
    float std[3];          /* CLIP std */
    int use_dct_scaling;   /* decode at the smallest libjpeg scale M/8 not below the target */
} image_preprocess_config;

/* The BridgeTowerProcessor defaults (CLIP mean/std, divisor 32, rescale 1/255, crop =
 * shortest_edge) for a given shortest edge; use_dct_scaling off. */
void image_preprocess_config_default(image_preprocess_config *cfg, int shortest_edge);

/* Reads a Hugging Face preprocessor_config.json. Fields used: size ({"shortest_edge": n} or
 * a bare n), size_divisor, resample (must be 3 = PIL BICUBIC), do_resize, do_rescale,
 * rescale_factor, image_mean, image_std (3 numbers or one), crop_size ({"shortest_edge": n}).
 * do_center_crop and do_normalize are type-checked but not used: BridgeTowerProcessor always
 * passes do_center_crop=True and do_normalize=True. Other keys (do_pad, processor_class, ...)
 * are ignored. Missing keys take the class defaults. Errors name the file and the key.
 * use_dct_scaling is set to 0 (it is a bt run option, not an HF field). */
bt_status image_preprocess_config_from_json(image_preprocess_config *cfg, const char *path);

/* Bytes one image needs while it is decoded and preprocessed with cfg (decoded and resized
 * pixels, resampler rows, the fp32 crop), for memory estimates before allocating (a
 * shortest_edge of 32768 asks for ~32 GB per image). */
uint64_t image_work_bytes(const image_preprocess_config *cfg);

/* Checks ranges (sizes >= 1, std > 0, finite numbers, and every pixel level 0..255 turned
 * into a finite float by the rescale and normalization). `source` names the origin in the
 * message (a file path or "config"). */
bt_status image_preprocess_config_validate(const image_preprocess_config *cfg,
                                           const char *source);

/* Size (out_w, out_h) the resize step produces for a w x h image (HF's
 * get_resize_output_image_size); (w, h) when do_resize is 0. */
void image_resize_target(int *out_w, int *out_h, int w, int h, const image_preprocess_config *cfg);

/* --- decoding ------------------------------------------------------------------------------ */

/* Reads a whole file into a bt_alloc'd buffer (free with bt_free). Errors name the path:
 * missing, a directory, unreadable, empty is allowed here (the decoder reports it). */
bt_status image_read_file(uint8_t **bytes, size_t *n, const char *path);

/* Decodes JPEG bytes to RGB (other formats fail: image_decode_for reads PNG and WebP too).
 * name_for_errors names the source in messages (a path).
 * min_w, min_h > 0 ask for DCT-domain downscaling: the smallest M in 1..8 with
 * ceil(W*M/8) >= min_w and ceil(H*M/8) >= min_h (W, H from the header); <= 0 decodes at full
 * size. On error *out is left empty (data NULL). */
bt_status image_decode_jpeg(image_u8 *out, const uint8_t *bytes, size_t n,
                            const char *name_for_errors, int min_w, int min_h);

/* Decodes for a given preprocessing config: when cfg->use_dct_scaling (and do_resize), reads
 * the header, computes the resize target from the stored size and decodes at the smallest
 * DCT scale not below it; otherwise decodes at full size. */
bt_status image_decode_jpeg_for(image_u8 *out, const uint8_t *bytes, size_t n,
                                const char *name_for_errors, const image_preprocess_config *cfg);

/* Decodes JPEG, PNG or WebP bytes (detected from their first bytes) to RGB; JPEG as
 * image_decode_jpeg_for (cfg may be NULL: full-size decode), PNG and WebP at full size. Other
 * formats (GIF, BMP, TIFF, ...) fail with BT_ERR_UNSUPPORTED naming the detected format;
 * unrecognized bytes with BT_ERR_FORMAT. On error *out is left empty. */
bt_status image_decode_for(image_u8 *out, const uint8_t *bytes, size_t n,
                           const char *name_for_errors, const image_preprocess_config *cfg);

/* image_read_file + image_decode_for (cfg may be NULL: full-size decode). */
bt_status image_load_file(image_u8 *out, const char *path, const image_preprocess_config *cfg);

/* --- resampling (resample.c) ---------------------------------------------------------------- */

/* Pillow-exact BICUBIC resize of `in` to out_w x out_h (allocates *out). */
void image_resize_bicubic(image_u8 *out, const image_u8 *in, int out_w, int out_h);

/* The window [x0, x0+win_w) x [y0, y0+win_h) of the Pillow-exact BICUBIC resize of `in` to
 * out_w x out_h, written to out (win_h, win_w, 3) with row stride win_w*3. The window must lie
 * inside the output. Each output pixel depends only on its own coefficients, so a window is
 * bit-identical to the same pixels of the full resize; only the source rows the window needs
 * go through the horizontal pass. */
void image_resize_bicubic_window(uint8_t *out, const image_u8 *in, int out_w, int out_h, int x0,
                                 int y0, int win_w, int win_h);

/* Same, resampling only the input rectangle box = {x0, y0, x1, y1} (fractional input pixels,
 * Pillow's `box` argument) onto the out_w x out_h output; box = {0, 0, in->w, in->h} is the
 * plain resize. */
void image_resize_bicubic_box(uint8_t *out, const image_u8 *in, const float box[4], int out_w,
                              int out_h, int x0, int y0, int win_w, int win_h);

/* --- the whole processor -------------------------------------------------------------------- */

/* Resize (from img->orig_* geometry), centre crop, rescale, normalize: out (3, crop, crop)
 * fp32, channels-first. img may be DCT-downscaled (img->w < img->orig_w). Thread-safe (no
 * shared state); allocates scratch internally. */
void image_preprocess(float *out, const image_u8 *img, const image_preprocess_config *cfg);

/* Same values rounded to bf16 (round to nearest even), written straight into e.g. a slot of
 * a batch buffer: out (3, crop, crop). */
void image_preprocess_bf16(bt_bf16 *out, const image_u8 *img, const image_preprocess_config *cfg);

#endif

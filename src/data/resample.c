/* resample.c: Pillow-equivalent BICUBIC resize of 8-bit RGB images (bit-exact with
 * PIL.Image.resize(size, Image.BICUBIC) for RGB images, no box, no reducing_gap).
 *
 * The arithmetic follows what Pillow's libImaging/Resample.c computes (facts, own code):
 *   - filter: Keys cubic with a = -0.5, support 2. For a downscale by `scale` = in/out > 1 the
 *     filter is stretched: support * scale, argument divided by scale (antialiasing).
 *   - per output pixel xx: center = (xx + 0.5) * scale; first tap xmin = (int)(center -
 *     support + 0.5) clamped to >= 0, end (int)(center + support + 0.5) clamped to the input
 *     size; weight of tap x: filter((x + xmin - center + 0.5) / filterscale), all in double;
 *     weights divided by their sum (when non-zero).
 *   - fixed point: weights become int32 with PRECISION_BITS = 22 (rounded half away from
 *     zero); accumulation starts at 1 << 21 (rounding), result is (acc >> 22) clamped to
 *     0..255.
 *   - two passes, horizontal first, rounding to uint8 in between; a pass whose size does not
 *     change is skipped (it would be the identity anyway); the horizontal pass only runs on
 *     the source rows the vertical pass reads.
 * The double arithmetic must not be contracted into FMAs (it would change some weights by
 * one unit): meson builds this file with -ffp-contract=off, and the expressions keep Pillow's
 * evaluation order.
 *
 * Pillow's `box` (a sub-rectangle of the input, in fractional input pixels) is supported:
 * the DCT-scaled decode path uses it to map exactly the picture's extent, which ends inside
 * the last, partly padded, scaled pixel (see image.c).
 *
 * Deliberately not here: other filters, other channel counts, float images, Pillow's
 * `reducing_gap` (HF does not use it). */
#include <limits.h>
#include <math.h>
#include <string.h>

#include "data/image.h"

enum { RS_PRECISION_BITS = 32 - 8 - 2 };

static double bicubic_weight(double x) {
    const double a = -0.5;
    if (x < 0.0) x = -x;
    if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
    if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
    return 0.0;
}

/* Fixed-point weights of outputs [first, first + count) of a 1-D resize in_size -> out_size. */
typedef struct rs_coeffs {
    int first, count; /* output positions covered */
    int ksize;        /* stride of k */
    int *start;       /* (count) first input tap */
    int *taps;        /* (count) number of taps */
    int32_t *k;       /* (count, ksize) */
} rs_coeffs;

/* The input interval [in0, in1) (Pillow's box, in input pixels; 0 and in_size for a plain
 * resize) is mapped onto the out_size outputs. */
static void rs_coeffs_init(rs_coeffs *c, int in_size, float in0, float in1, int out_size,
                           int first, int count) {
    BT_ASSERT(in_size > 0 && out_size > 0 && first >= 0 && count > 0);
    BT_ASSERT(first + count <= out_size && in1 > in0);
    /* Pillow: (double)(in1 - in0) / outSize, the difference taken in float. */
    double scale = (double)(in1 - in0) / out_size;
    double filterscale = scale < 1.0 ? 1.0 : scale;
    double support = 2.0 * filterscale;
    int ksize = (int)ceil(support) * 2 + 1;
    double *w = bt_alloc((size_t)ksize * sizeof(double));

    c->first = first;
    c->count = count;
    c->ksize = ksize;
    c->start = bt_alloc((size_t)count * sizeof(int));
    c->taps = bt_alloc((size_t)count * sizeof(int));
    c->k = bt_calloc((size_t)count * (size_t)ksize * sizeof(int32_t));
    for (int i = 0; i < count; i++) {
        int xx = first + i;
        double center = in0 + (xx + 0.5) * scale;
        double ww = 0.0;
        double ss = 1.0 / filterscale;
        int xmin = (int)(center - support + 0.5);
        if (xmin < 0) xmin = 0;
        int xmax = (int)(center + support + 0.5);
        if (xmax > in_size) xmax = in_size;
        xmax -= xmin;
        BT_ASSERT(xmax >= 1 && xmax <= ksize);
        for (int x = 0; x < xmax; x++) {
            double v = bicubic_weight((x + xmin - center + 0.5) * ss);
            w[x] = v;
            ww += v;
        }
        int32_t *k = c->k + (size_t)i * (size_t)ksize;
        for (int x = 0; x < xmax; x++) {
            double v = ww != 0.0 ? w[x] / ww : w[x];
            k[x] = v < 0 ? (int32_t)(-0.5 + v * (1 << RS_PRECISION_BITS))
                         : (int32_t)(0.5 + v * (1 << RS_PRECISION_BITS));
        }
        c->start[i] = xmin;
        c->taps[i] = xmax;
    }
    bt_free(w);
}

/* Widens every output to exactly ksize taps (zero weights added after the real ones, the
 * start moved left where the row would otherwise be overrun), so the horizontal kernel can
 * run a fixed trip count. Adding zero-weight taps leaves every sum unchanged. Returns 0 (and
 * changes nothing) when the input is narrower than ksize. */
static int rs_coeffs_make_uniform(rs_coeffs *c, int in_size) {
    const int ks = c->ksize;
    if (in_size < ks) return 0;
    for (int i = 0; i < c->count; i++) {
        int32_t *k = c->k + (size_t)i * (size_t)ks;
        int shift = c->start[i] + ks > in_size ? c->start[i] + ks - in_size : 0;
        if (shift) {
            memmove(k + shift, k, (size_t)c->taps[i] * sizeof(int32_t));
            memset(k, 0, (size_t)shift * sizeof(int32_t));
            c->start[i] -= shift;
        }
        for (int x = c->taps[i] + shift; x < ks; x++) k[x] = 0;
        c->taps[i] = ks;
    }
    return 1;
}

static void rs_coeffs_free(rs_coeffs *c) {
    bt_free(c->start);
    bt_free(c->taps);
    bt_free(c->k);
    memset(c, 0, sizeof *c);
}

static inline uint8_t rs_clip8(int32_t acc) {
    int32_t v = acc >> RS_PRECISION_BITS; /* arithmetic shift: floor, as Pillow's lookup */
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* One output pixel of the horizontal pass over `taps` taps starting at p. */
#define RS_HPIXEL(out, p, k, taps)                                                           \
    do {                                                                                     \
        int32_t s0 = half, s1 = half, s2 = half;                                             \
        for (int x = 0; x < (taps); x++) {                                                   \
            s0 += (p)[3 * x + 0] * (k)[x];                                                   \
            s1 += (p)[3 * x + 1] * (k)[x];                                                   \
            s2 += (p)[3 * x + 2] * (k)[x];                                                   \
        }                                                                                    \
        (out)[0] = rs_clip8(s0);                                                             \
        (out)[1] = rs_clip8(s1);                                                             \
        (out)[2] = rs_clip8(s2);                                                             \
    } while (0)

/* Fixed-trip-count kernels for the tap counts BridgeTower resizes produce (2*ceil(2*scale)+1:
 * 5 when upscaling, 7..17 for downscales up to 4x); the compiler unrolls them. */
#define RS_DEFINE_HKERNEL(K)                                                                 \
    static void rs_horizontal_k##K(uint8_t *dst, const uint8_t *src, int src_w, int row0,    \
                                   int nrows, const rs_coeffs *hc) {                         \
        const int32_t half = 1 << (RS_PRECISION_BITS - 1);                                   \
        for (int r = 0; r < nrows; r++) {                                                    \
            const uint8_t *in = src + ((size_t)(row0 + r) * (size_t)src_w) * 3;              \
            uint8_t *out = dst + (size_t)r * (size_t)hc->count * 3;                          \
            for (int i = 0; i < hc->count; i++) {                                            \
                const int32_t *k = hc->k + (size_t)i * K;                                    \
                const uint8_t *p = in + (size_t)hc->start[i] * 3;                            \
                RS_HPIXEL(out + 3 * i, p, k, K);                                             \
            }                                                                                \
        }                                                                                    \
    }
RS_DEFINE_HKERNEL(5)
RS_DEFINE_HKERNEL(7)
RS_DEFINE_HKERNEL(9)
RS_DEFINE_HKERNEL(11)
RS_DEFINE_HKERNEL(13)
RS_DEFINE_HKERNEL(15)
RS_DEFINE_HKERNEL(17)

/* Horizontal pass: rows [row0, row0 + nrows) of src (src_w wide) -> dst (nrows, hc->count, 3).
 * `uniform`: every output has hc->ksize taps (rs_coeffs_make_uniform). */
static void rs_horizontal(uint8_t *dst, const uint8_t *src, int src_w, int row0, int nrows,
                          const rs_coeffs *hc, int uniform) {
    if (uniform) {
        switch (hc->ksize) {
        case 5: rs_horizontal_k5(dst, src, src_w, row0, nrows, hc); return;
        case 7: rs_horizontal_k7(dst, src, src_w, row0, nrows, hc); return;
        case 9: rs_horizontal_k9(dst, src, src_w, row0, nrows, hc); return;
        case 11: rs_horizontal_k11(dst, src, src_w, row0, nrows, hc); return;
        case 13: rs_horizontal_k13(dst, src, src_w, row0, nrows, hc); return;
        case 15: rs_horizontal_k15(dst, src, src_w, row0, nrows, hc); return;
        case 17: rs_horizontal_k17(dst, src, src_w, row0, nrows, hc); return;
        default: break;
        }
    }
    const int32_t half = 1 << (RS_PRECISION_BITS - 1);
    for (int r = 0; r < nrows; r++) {
        const uint8_t *in = src + ((size_t)(row0 + r) * (size_t)src_w) * 3;
        uint8_t *out = dst + (size_t)r * (size_t)hc->count * 3;
        for (int i = 0; i < hc->count; i++) {
            const int32_t *k = hc->k + (size_t)i * (size_t)hc->ksize;
            const uint8_t *p = in + (size_t)hc->start[i] * 3;
            RS_HPIXEL(out + 3 * i, p, k, hc->taps[i]);
        }
    }
}

/* Vertical pass: src rows are absolute input rows minus row0 (src holds rows row0..),
 * each `n` bytes long (already the window's columns) -> dst (vc->count, n). */
static void rs_vertical(uint8_t *dst, const uint8_t *src, size_t n, int row0, const rs_coeffs *vc,
                        int32_t *acc /* (n) scratch */) {
    const int32_t half = 1 << (RS_PRECISION_BITS - 1);
    for (int i = 0; i < vc->count; i++) {
        const int32_t *k = vc->k + (size_t)i * (size_t)vc->ksize;
        for (size_t j = 0; j < n; j++) acc[j] = half;
        for (int y = 0; y < vc->taps[i]; y++) {
            const uint8_t *row = src + (size_t)(vc->start[i] + y - row0) * n;
            const int32_t ky = k[y];
            for (size_t j = 0; j < n; j++) acc[j] += row[j] * ky;
        }
        uint8_t *out = dst + (size_t)i * n;
        for (size_t j = 0; j < n; j++) out[j] = rs_clip8(acc[j]);
    }
}

void image_resize_bicubic_box(uint8_t *out, const image_u8 *in, const float box[4], int out_w,
                              int out_h, int x0, int y0, int win_w, int win_h) {
    BT_ASSERT(in && in->data && in->w > 0 && in->h > 0);
    BT_ASSERT(out_w > 0 && out_h > 0 && win_w > 0 && win_h > 0);
    BT_ASSERT(x0 >= 0 && y0 >= 0 && x0 + win_w <= out_w && y0 + win_h <= out_h);
    BT_ASSERT(box[0] >= 0 && box[1] >= 0 && box[2] > box[0] && box[3] > box[1]);
    BT_ASSERT(box[2] <= (float)in->w && box[3] <= (float)in->h);
    const int full_x = box[0] == 0 && box[2] == (float)in->w;
    const int full_y = box[1] == 0 && box[3] == (float)in->h;
    const int need_h = out_w != in->w || !full_x;
    const int need_v = out_h != in->h || !full_y;
    const size_t row_bytes = (size_t)win_w * 3;

    if (!need_v) {
        /* Output rows are input rows y0..; only the horizontal pass (or a copy). */
        if (need_h) {
            rs_coeffs hc;
            rs_coeffs_init(&hc, in->w, box[0], box[2], out_w, x0, win_w);
            int uniform = rs_coeffs_make_uniform(&hc, in->w);
            rs_horizontal(out, in->data, in->w, y0, win_h, &hc, uniform);
            rs_coeffs_free(&hc);
        } else {
            for (int r = 0; r < win_h; r++)
                memcpy(out + (size_t)r * row_bytes,
                       in->data + ((size_t)(y0 + r) * (size_t)in->w + (size_t)x0) * 3, row_bytes);
        }
        return;
    }

    rs_coeffs vc;
    rs_coeffs_init(&vc, in->h, box[1], box[3], out_h, y0, win_h);
    /* Source rows the window reads: from the first tap of its first row to the end of the
     * last tap of its last row (taps move monotonically with the output row). */
    int row0 = vc.start[0];
    int row1 = vc.start[win_h - 1] + vc.taps[win_h - 1];
    for (int i = 0; i < win_h; i++) {
        if (vc.start[i] < row0) row0 = vc.start[i];
        if (vc.start[i] + vc.taps[i] > row1) row1 = vc.start[i] + vc.taps[i];
    }
    int32_t *acc = bt_alloc(row_bytes * sizeof(int32_t));
    if (need_h) {
        rs_coeffs hc;
        rs_coeffs_init(&hc, in->w, box[0], box[2], out_w, x0, win_w);
        int uniform = rs_coeffs_make_uniform(&hc, in->w);
        uint8_t *tmp = bt_alloc((size_t)(row1 - row0) * row_bytes);
        rs_horizontal(tmp, in->data, in->w, row0, row1 - row0, &hc, uniform);
        rs_vertical(out, tmp, row_bytes, row0, &vc, acc);
        bt_free(tmp);
        rs_coeffs_free(&hc);
    } else if (x0 == 0 && win_w == in->w) {
        rs_vertical(out, in->data, row_bytes, 0, &vc, acc);
    } else {
        /* Width unchanged but only some columns wanted: gather them, then the vertical pass. */
        uint8_t *tmp = bt_alloc((size_t)(row1 - row0) * row_bytes);
        for (int r = row0; r < row1; r++)
            memcpy(tmp + (size_t)(r - row0) * row_bytes,
                   in->data + ((size_t)r * (size_t)in->w + (size_t)x0) * 3, row_bytes);
        rs_vertical(out, tmp, row_bytes, row0, &vc, acc);
        bt_free(tmp);
    }
    bt_free(acc);
    rs_coeffs_free(&vc);
}

void image_resize_bicubic_window(uint8_t *out, const image_u8 *in, int out_w, int out_h, int x0,
                                 int y0, int win_w, int win_h) {
    const float box[4] = {0.0f, 0.0f, (float)in->w, (float)in->h};
    image_resize_bicubic_box(out, in, box, out_w, out_h, x0, y0, win_w, win_h);
}

void image_resize_bicubic(image_u8 *out, const image_u8 *in, int out_w, int out_h) {
    image_u8_init(out, out_w, out_h);
    image_resize_bicubic_window(out->data, in, out_w, out_h, 0, 0, out_w, out_h);
}

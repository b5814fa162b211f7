/* synth.c: the synthetic shapes dataset (see synth.h for what a scene is, docs/data.md for the
 * caption grammar).
 *
 * Randomness: every record draws from its own xoshiro256** stream keyed by (seed, split,
 * index), so records are independent of each other and of the split sizes. Geometry: a cell
 * of the 3x3 grid is 1/3 of the side; the largest shape reaches 0.13*1.08 + 0.025 = 0.165 of
 * the side from the cell centre, below the half cell (0.1667), so shapes never overlap and a
 * place word is never ambiguous.
 *
 * Deliberately not done: anti-aliasing (hard edges are fine for a learnable toy task and keep
 * the renderer trivially checkable), text rendering, non-square images. */
#include "data/synth.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jpeglib.h>

#include "fileio.h"
#include "rng.h"

static const char *const shape_names[SYNTH_N_SHAPES] = {"circle", "square", "triangle", "star"};
static const char *const colour_names[SYNTH_N_COLOURS] = {"red",    "green",  "blue",  "yellow",
                                                          "purple", "orange", "white", "black"};
static const uint8_t colour_rgb[SYNTH_N_COLOURS][3] = {
    {220, 30, 30},  {30, 170, 50},  {30, 60, 220},   {240, 220, 30},
    {140, 40, 170}, {245, 140, 20}, {245, 245, 245}, {15, 15, 15}};
/* Backgrounds are kept away from every shape colour so every shape stays visible. */
static const char *const background_names[SYNTH_N_BACKGROUNDS] = {"grey", "beige", "teal", "pink"};
static const uint8_t background_rgb[SYNTH_N_BACKGROUNDS][3] = {
    {128, 128, 128}, {210, 195, 160}, {40, 125, 125}, {235, 165, 185}};
static const char *const place_names[SYNTH_N_PLACES] = {
    "at the top left",    "at the top",    "at the top right",
    "on the left",        "in the centre", "on the right",
    "at the bottom left", "at the bottom", "at the bottom right"};
static const char *const split_names[SYNTH_N_SPLITS] = {"train", "val", "test"};

/* Nominal radii (fraction of the side), jitter ranges: see the geometry note above. */
static const float radius_small = 0.075f, radius_large = 0.13f;
static const float scale_jitter = 0.08f, centre_jitter = 0.025f;

const char *synth_shape_name(int s) {
    return s >= 0 && s < SYNTH_N_SHAPES ? shape_names[s] : "?";
}
const char *synth_colour_name(int c) {
    return c >= 0 && c < SYNTH_N_COLOURS ? colour_names[c] : "?";
}
const char *synth_background_name(int b) {
    return b >= 0 && b < SYNTH_N_BACKGROUNDS ? background_names[b] : "?";
}
const char *synth_place_name(int p) {
    return p >= 0 && p < SYNTH_N_PLACES ? place_names[p] : "?";
}
const char *synth_split_name(synth_split s) {
    return (int)s >= 0 && s < SYNTH_N_SPLITS ? split_names[s] : "?";
}
void synth_colour_rgb(int c, uint8_t rgb[3]) {
    BT_ASSERT(c >= 0 && c < SYNTH_N_COLOURS);
    memcpy(rgb, colour_rgb[c], 3);
}
void synth_background_rgb(int b, uint8_t rgb[3]) {
    BT_ASSERT(b >= 0 && b < SYNTH_N_BACKGROUNDS);
    memcpy(rgb, background_rgb[b], 3);
}

/* ---- scenes ------------------------------------------------------------------------------ */

void synth_scene_random(synth_scene *sc, uint64_t key) {
    bt_rng r;
    bt_rng_seed(&r, key);
    memset(sc, 0, sizeof *sc);
    sc->n_objects = 1 + (int)bt_rng_below(&r, SYNTH_MAX_OBJECTS);
    /* Distinct places: a partial Fisher-Yates over the 9 cells. */
    int cells[SYNTH_N_PLACES];
    for (int i = 0; i < SYNTH_N_PLACES; i++)
        cells[i] = i;
    for (int k = 0; k < sc->n_objects; k++) {
        int j = k + (int)bt_rng_below(&r, (uint64_t)(SYNTH_N_PLACES - k));
        int t = cells[k];
        cells[k] = cells[j];
        cells[j] = t;
        synth_object *o = &sc->obj[k];
        o->place = cells[k];
        o->shape = (int)bt_rng_below(&r, SYNTH_N_SHAPES);
        o->colour = (int)bt_rng_below(&r, SYNTH_N_COLOURS);
        o->large = (int)bt_rng_below(&r, 2);
        o->jitter_x = (float)((2 * bt_rng_uniform(&r) - 1) * centre_jitter);
        o->jitter_y = (float)((2 * bt_rng_uniform(&r) - 1) * centre_jitter);
        o->scale = (float)(1 + (2 * bt_rng_uniform(&r) - 1) * scale_jitter);
    }
    sc->background = (int)bt_rng_below(&r, SYNTH_N_BACKGROUNDS);
    sc->noise_seed = bt_rng_next(&r);
}

/* Key of record `index` of `split`: splitmix64 chained over (seed, split), XOR index. */
static uint64_t record_key(uint64_t seed, int stream, int64_t index) {
    uint64_t st = seed;
    uint64_t a = bt_splitmix64(&st);
    st = a ^ ((uint64_t)(stream + 1) * 0xD1B54A32D192ED03ull);
    uint64_t b = bt_splitmix64(&st);
    st = b ^ (uint64_t)index;
    return bt_splitmix64(&st);
}

void synth_scene_sample(synth_scene *sc, uint64_t seed, synth_split split, int64_t index) {
    synth_scene_random(sc, record_key(seed, (int)split, index));
}

size_t synth_scene_caption(const synth_scene *sc, char *buf, size_t cap) {
    BT_ASSERT(cap >= SYNTH_CAPTION_MAX);
    size_t n = 0;
    for (int k = 0; k < sc->n_objects; k++) {
        const synth_object *o = &sc->obj[k];
        const char *sep = k == 0 ? "" : (k == sc->n_objects - 1 ? " and " : ", ");
        n +=
            (size_t)snprintf(buf + n, cap - n, "%sa %s %s %s %s", sep, o->large ? "large" : "small",
                             colour_names[o->colour], shape_names[o->shape], place_names[o->place]);
    }
    n +=
        (size_t)snprintf(buf + n, cap - n, " on a %s background", background_names[sc->background]);
    BT_ASSERT(n < cap);
    return n;
}

/* Which side of the directed edge (ax,ay)->(bx,by) the point lies on. */
static float edge(float ax, float ay, float bx, float by, float px, float py) {
    return (bx - ax) * (py - ay) - (by - ay) * (px - ax);
}

int synth_object_covers(const synth_object *o, int size, int x, int y) {
    float s = (float)size;
    float cx = ((float)(o->place % 3) + 0.5f) * s / 3 + o->jitter_x * s;
    float cy = ((float)(o->place / 3) + 0.5f) * s / 3 + o->jitter_y * s;
    float r = (o->large ? radius_large : radius_small) * o->scale * s;
    float dx = (float)x + 0.5f - cx, dy = (float)y + 0.5f - cy;
    switch (o->shape) {
    case 0: /* circle */
        return dx * dx + dy * dy <= r * r;
    case 1: /* square, side 1.6 r (its area is close to the circle's) */
        return fabsf(dx) <= 0.8f * r && fabsf(dy) <= 0.8f * r;
    case 2: { /* upward triangle inscribed in the circle of radius r */
        float ax = 0, ay = -r, bx = 0.866f * r, by = 0.5f * r, qx = -0.866f * r, qy = 0.5f * r;
        float e0 = edge(ax, ay, bx, by, dx, dy), e1 = edge(bx, by, qx, qy, dx, dy),
              e2 = edge(qx, qy, ax, ay, dx, dy);
        return (e0 >= 0 && e1 >= 0 && e2 >= 0) || (e0 <= 0 && e1 <= 0 && e2 <= 0);
    }
    case 3: { /* five-pointed star, outer radius r, inner 0.45 r, a point upwards */
        float vx[10], vy[10];
        for (int i = 0; i < 10; i++) {
            float a = (float)(-M_PI / 2 + i * M_PI / 5);
            float rr = (i % 2) ? 0.45f * r : r;
            vx[i] = rr * cosf(a);
            vy[i] = rr * sinf(a);
        }
        int inside = 0; /* even-odd crossing test */
        for (int i = 0, j = 9; i < 10; j = i++) {
            if ((vy[i] > dy) != (vy[j] > dy) &&
                dx < (vx[j] - vx[i]) * (dy - vy[i]) / (vy[j] - vy[i]) + vx[i])
                inside = !inside;
        }
        return inside;
    }
    }
    return 0;
}

void synth_scene_render(const synth_scene *sc, uint8_t *rgb, int size) {
    BT_ASSERT(size >= 1);
    for (int y = 0; y < size; y++) {
        for (int x = 0; x < size; x++) {
            const uint8_t *c = background_rgb[sc->background];
            for (int k = 0; k < sc->n_objects; k++)
                if (synth_object_covers(&sc->obj[k], size, x, y)) c = colour_rgb[sc->obj[k].colour];
            memcpy(rgb + ((size_t)y * size + x) * 3, c, 3);
        }
    }
    bt_rng r;
    bt_rng_seed(&r, sc->noise_seed);
    size_t n = (size_t)size * size * 3;
    for (size_t i = 0; i < n; i++) {
        int v = rgb[i] + (int)bt_rng_below(&r, 2 * SYNTH_NOISE + 1) - SYNTH_NOISE;
        rgb[i] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
    }
}

/* ---- JPEG -------------------------------------------------------------------------------- */

typedef struct jpeg_error_ctx {
    struct jpeg_error_mgr mgr;
    jmp_buf jump;
    char message[JMSG_LENGTH_MAX];
} jpeg_error_ctx;

static void jpeg_error_jump(j_common_ptr cinfo) {
    jpeg_error_ctx *e = (jpeg_error_ctx *)cinfo->err;
    e->mgr.format_message(cinfo, e->message);
    longjmp(e->jump, 1);
}

bt_status synth_write_jpeg(const char *path, const uint8_t *rgb, int width, int height,
                           int quality) {
    BT_ASSERT(width > 0 && height > 0 && quality >= 1 && quality <= 100);
    /* af is not modified between setjmp and a longjmp, so it is valid after one. */
    bt_atomic_file af;
    bt_status st = bt_atomic_open(&af, path, "JPEG image");
    if (st) return st;
    struct jpeg_compress_struct ci;
    jpeg_error_ctx err;
    ci.err = jpeg_std_error(&err.mgr);
    err.mgr.error_exit = jpeg_error_jump;
    if (setjmp(err.jump)) {
        jpeg_destroy_compress(&ci);
        bt_atomic_abort(&af);
        return bt_fail(BT_ERR_IO, "%s: JPEG encoding failed: %s", path, err.message);
    }
    jpeg_create_compress(&ci);
    jpeg_stdio_dest(&ci, af.fp);
    ci.image_width = (JDIMENSION)width;
    ci.image_height = (JDIMENSION)height;
    ci.input_components = 3;
    ci.in_color_space = JCS_RGB;
    jpeg_set_defaults(&ci);
    jpeg_set_quality(&ci, quality, TRUE);
    for (int c = 0; c < 3; c++)
        ci.comp_info[c].h_samp_factor = ci.comp_info[c].v_samp_factor = 1;
    jpeg_start_compress(&ci, TRUE);
    while (ci.next_scanline < ci.image_height) {
        JSAMPROW row = (JSAMPROW)(rgb + (size_t)ci.next_scanline * width * 3);
        jpeg_write_scanlines(&ci, &row, 1);
    }
    jpeg_finish_compress(&ci);
    jpeg_destroy_compress(&ci);
    return bt_atomic_commit(&af);
}

/* ---- dataset ----------------------------------------------------------------------------- */

static bt_status make_dir(const char *path) {
    return bt_check_output_dir(path, "dataset directory", 1);
}

/* Caption of an independently sampled distractor scene for (split, index, attempt). */
static void distractor_caption(uint64_t seed, synth_split split, int64_t index, int attempt,
                               char *buf) {
    synth_scene sc;
    uint64_t key = record_key(seed, 16 + (int)split, index) ^ ((uint64_t)attempt << 40);
    uint64_t st = key;
    synth_scene_random(&sc, bt_splitmix64(&st));
    synth_scene_caption(&sc, buf, SYNTH_CAPTION_MAX);
}

static bt_status write_split(const synth_options *o, synth_split split, uint8_t *rgb) {
    char path[4096], rel[256];
    const char *name = split_names[split];
    snprintf(path, sizeof path, "%s/images/%s", o->out_dir, name);
    bt_status st = make_dir(path);
    if (st) return st;
    snprintf(path, sizeof path, "%s/%s.jsonl", o->out_dir, name);
    /* The manifest is written atomically after its images: a killed run leaves the previous
     * manifest (or none), never a half-written one. */
    bt_atomic_file af;
    if ((st = bt_atomic_open(&af, path, "manifest"))) return st;
    FILE *f = af.fp;
    int matching = split != SYNTH_SPLIT_TRAIN;
    for (int64_t i = 0; i < o->n[split]; i++) {
        synth_scene sc;
        char caption[SYNTH_CAPTION_MAX];
        synth_scene_sample(&sc, o->seed, split, i);
        synth_scene_caption(&sc, caption, sizeof caption);
        synth_scene_render(&sc, rgb, o->size);
        snprintf(rel, sizeof rel, "images/%s/%06" PRId64 ".jpg", name, i);
        char img_path[4400];
        snprintf(img_path, sizeof img_path, "%s/%s", o->out_dir, rel);
        if ((st = synth_write_jpeg(img_path, rgb, o->size, o->size, 92))) break;
        /* Captions use only [a-z ,], so they need no JSON escaping. */
        fprintf(f, "{\"id\": \"%s-%06" PRId64 "\", \"image\": \"%s\", \"caption\": \"%s\"", name, i,
                rel, caption);
        if (matching) {
            char choices[5][SYNTH_CAPTION_MAX];
            bt_rng r;
            bt_rng_seed(&r, record_key(o->seed, 32 + (int)split, i));
            int label = (int)bt_rng_below(&r, 5);
            snprintf(choices[label], SYNTH_CAPTION_MAX, "%s", caption);
            int attempt = 0;
            for (int k = 0; k < 5; k++) {
                if (k == label) continue;
                for (;;) { /* distinct from the truth and from earlier distractors */
                    distractor_caption(o->seed, split, i, attempt++, choices[k]);
                    int dup = 0;
                    for (int q = 0; q < 5; q++)
                        if (q != k && (q == label || q < k) && !strcmp(choices[q], choices[k]))
                            dup = 1;
                    if (!dup) break;
                    BT_ASSERT(attempt < 1000);
                }
            }
            fprintf(f, ", \"caption_choices\": [");
            for (int k = 0; k < 5; k++)
                fprintf(f, "%s\"%s\"", k ? ", " : "", choices[k]);
            fprintf(f, "], \"label\": %d", label);
        }
        fprintf(f, "}\n");
    }
    if (st != BT_OK) {
        bt_atomic_abort(&af);
        return st;
    }
    return bt_atomic_commit(&af);
}

bt_status synth_generate(const synth_options *o) {
    if (!o->out_dir || !o->out_dir[0]) return bt_fail(BT_ERR_ARG, "synth: no output directory");
    if (o->size < 16 || o->size > 4096)
        return bt_fail(BT_ERR_ARG, "synth: image size %d outside 16..4096", o->size);
    for (int s = 0; s < SYNTH_N_SPLITS; s++)
        if (o->n[s] < 0 || o->n[s] > 100000000)
            return bt_fail(BT_ERR_ARG, "synth: %s size %" PRId64 " outside 0..100000000",
                           split_names[s], o->n[s]);
    char path[4096];
    bt_status st = make_dir(o->out_dir);
    if (st) return st;
    snprintf(path, sizeof path, "%s/images", o->out_dir);
    if ((st = make_dir(path))) return st;
    /* Every manifest target checked before any image is written. */
    for (int s = 0; s < SYNTH_N_SPLITS && st == BT_OK; s++) {
        snprintf(path, sizeof path, "%s/%s.jsonl", o->out_dir, split_names[s]);
        st = bt_check_output_file(path, "manifest");
    }
    if (st) return st;
    uint8_t *rgb = malloc((size_t)o->size * o->size * 3);
    if (!rgb) return bt_fail(BT_ERR_NOMEM, "synth: out of memory for a %dx%d image", o->size, o->size);
    for (int s = 0; s < SYNTH_N_SPLITS && st == BT_OK; s++) {
        if (o->n[s] > 0) {
            st = write_split(o, (synth_split)s, rgb);
        } else { /* an empty split has no manifest: an old one would describe another dataset */
            snprintf(path, sizeof path, "%s/%s.jsonl", o->out_dir, split_names[s]);
            st = bt_remove_owned_file(path, "manifest");
        }
    }
    free(rgb);
    return st;
}

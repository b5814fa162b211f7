/* synth.h: a small synthetic captioned-image dataset, generated in C, for the demo and tests.
 *
 * A scene is 1-3 coloured shapes on a plain background. Each shape has a shape (circle,
 * square, triangle, star), a colour (8), a size (small, large) and a place on a 3x3 grid
 * (top left ... bottom right; two shapes never share a cell, so they never overlap). The
 * caption names all of it, in a fixed grammar (docs/data.md):
 *   "a large red circle on the left and a small blue square at the top right on a grey
 *    background"
 * so the caption determines the image up to a small position/size jitter and pixel noise,
 * and a model can learn retrieval from it. Images are drawn by plain point-in-shape tests
 * (no anti-aliasing), get uniform noise of +-SYNTH_NOISE levels, and are written as JPEG
 * (libjpeg-turbo, quality 92, 4:4:4 so small shapes keep their colour).
 *
 * synth_generate writes DIR/{train,val,test}.jsonl and DIR/images/<split>/NNNNNN.jpg; the
 * validation and test records also carry the New Yorker matching-task fields:
 * caption_choices (the true caption and the captions of 4 other, independently sampled
 * scenes, in a shuffled order) and label (the true caption's position).
 *
 * Outputs are written atomically (src/fileio.h): each JPEG, then each manifest once its
 * images exist, so a killed run never leaves a half-written manifest. The directory owns
 * {train,val,test}.jsonl: a split of size 0 has its manifest removed (images of an older,
 * larger run may remain under images/, but no manifest names them).
 *
 * Determinism: record i of split s depends only on (seed, s, i): a bigger --train N keeps the
 * first records identical. Same seed, same bytes (libjpeg-turbo is deterministic).
 *
 * Deliberately not here: anything photographic (textures, occlusion, perspective); variable
 * aspect ratios (every image is size x size). */
#ifndef BT_DATA_SYNTH_H
#define BT_DATA_SYNTH_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

enum {
    SYNTH_N_SHAPES = 4,
    SYNTH_N_COLOURS = 8,
    SYNTH_N_BACKGROUNDS = 4,
    SYNTH_N_PLACES = 9,
    SYNTH_MAX_OBJECTS = 3,
    SYNTH_NOISE = 10,        /* +- pixel levels of uniform noise per channel */
    SYNTH_CAPTION_MAX = 256, /* longest caption (3 objects) is well below this */
};

typedef enum {
    SYNTH_SPLIT_TRAIN,
    SYNTH_SPLIT_VAL,
    SYNTH_SPLIT_TEST,
    SYNTH_N_SPLITS,
} synth_split;

typedef struct synth_object {
    int shape;  /* 0..SYNTH_N_SHAPES-1: circle, square, triangle, star */
    int colour; /* 0..SYNTH_N_COLOURS-1 */
    int large;  /* 0 small, 1 large */
    int place;  /* 0..8, row-major over the 3x3 grid: 0 top left, 4 centre, 8 bottom right */
    float jitter_x, jitter_y; /* centre offset, fraction of the image side */
    float scale;              /* size jitter factor around the nominal radius */
} synth_object;

typedef struct synth_scene {
    int n_objects;
    synth_object obj[SYNTH_MAX_OBJECTS];
    int background; /* 0..SYNTH_N_BACKGROUNDS-1 */
    uint64_t noise_seed;
} synth_scene;

typedef struct synth_options {
    const char *out_dir;
    int64_t n[SYNTH_N_SPLITS]; /* records per split; 0 writes an empty split (no file) */
    uint64_t seed;
    int size; /* image side in pixels, 16..4096 */
} synth_options;

/* Record `index` of `split` for `seed` (a pure function). */
void synth_scene_sample(synth_scene *sc, uint64_t seed, synth_split split, int64_t index);
/* Any scene from a generator state (used for distractors and tokenizer corpora). */
void synth_scene_random(synth_scene *sc, uint64_t key);
/* Writes the caption (NUL-terminated, < SYNTH_CAPTION_MAX bytes); returns its length. */
size_t synth_scene_caption(const synth_scene *sc, char *buf, size_t cap);
/* Draws the scene into rgb (size, size, 3), row-major, 8-bit. */
void synth_scene_render(const synth_scene *sc, uint8_t *rgb, int size);
/* 1 when pixel (x, y) of a size x size image lies inside object k's shape (the renderer's own
 * test, exposed so tests can check image/caption agreement). */
int synth_object_covers(const synth_object *o, int size, int x, int y);

const char *synth_shape_name(int shape);
const char *synth_colour_name(int colour);
const char *synth_background_name(int background);
const char *synth_place_name(int place); /* "on the left", "at the top right", ... */
void synth_colour_rgb(int colour, uint8_t rgb[3]);
void synth_background_rgb(int background, uint8_t rgb[3]);
const char *synth_split_name(synth_split s); /* "train", "val", "test" */

/* Encodes an 8-bit RGB (height, width, 3) buffer as a baseline JPEG file. Errors name the
 * path (cannot create, libjpeg error, short write). */
bt_status synth_write_jpeg(const char *path, const uint8_t *rgb, int width, int height,
                           int quality);

/* Generates the dataset (directories are created as needed). Errors name the path. */
bt_status synth_generate(const synth_options *o);

#endif

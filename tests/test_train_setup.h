/* test_train_setup.h: what the bt-train tests (test_bt_train.c, test_dist.c,
 * test_train_sources.c) set up before running the job: a synthetic captioned-image set
 * written by src/data/synth.h and the path of the synthetic model config. Exits the test
 * (status 1) with the error on failure.
 * Deliberately not here: the run configs themselves (each test writes its own). */
#ifndef BT_TEST_TRAIN_SETUP_H
#define BT_TEST_TRAIN_SETUP_H

#include <stddef.h>

/* Writes train.jsonl (n_train records) and, when non-zero, val.jsonl / test.jsonl with their
 * 64 x 64 images into dir: seed 3, the same bytes on every run. */
void tts_synth_data(const char *dir, int n_train, int n_val, int n_test);

/* out = $BT_CONFIGS/synthetic-model (configs/synthetic-model when BT_CONFIGS is unset). */
void tts_synthetic_model_dir(char *out, size_t cap);

#endif

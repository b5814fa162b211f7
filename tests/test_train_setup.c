/* test_train_setup.c: the synthetic data set and model path the bt-train tests share
 * (test_train_setup.h). */
#include "test_train_setup.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/synth.h"
#include "status.h"

void tts_synth_data(const char *dir, int n_train, int n_val, int n_test) {
    synth_options so;
    memset(&so, 0, sizeof so);
    so.out_dir = dir;
    so.n[0] = n_train;
    so.n[1] = n_val;
    so.n[2] = n_test;
    so.seed = 3;
    so.size = 64;
    if (synth_generate(&so) != BT_OK) {
        fprintf(stderr, "synth: %s\n", bt_error_message());
        exit(1);
    }
}

void tts_synthetic_model_dir(char *out, size_t cap) {
    const char *configs = getenv("BT_CONFIGS");
    snprintf(out, cap, "%s/synthetic-model", configs ? configs : "configs");
}

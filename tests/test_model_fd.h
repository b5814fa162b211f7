/* test_model_fd.h: the finite-difference harness shared by the whole-model gradient tests
 * (test_model_grad.c: bt_forward/bt_backward; test_model_phases.c: the phased API).
 *
 * A loss L(θ) of the tiny model is differentiated along a direction v:
 *     fd = (L(θ + εv) - L(θ - εv)) / 2ε     vs     an = g·(θ+ - θ-) / 2ε
 * with the fp32-rounded perturbation actually applied, losses and sums in double. Directions
 * scale each tensor by its own rms (v_i = z_i · rms(tensor of i), z ~ N(0, 1)), so every tensor
 * moves by the same relative amount ε (default 2.5e-3, FD_EPS=<ε> in the environment
 * overrides it). Accept |fd - an| <= 1e-2·|an| + 1e-4·max(1, |L|): test_model_grad.c states the
 * measurements behind it (an ε² truncation error down to a ~1e-5 noise floor of the fp32
 * losses).
 *
 * Deliberately not here: the losses themselves (each test defines its callback). */
#ifndef BT_TEST_MODEL_FD_H
#define BT_TEST_MODEL_FD_H

#include <stddef.h>

#include "model/config.h"
#include "model/model.h"
#include "model/params.h"
#include "test_util.h"

/* configs/tiny/config.json (BT_CONFIGS set by meson, else the source tree's); records a
 * failed case and returns 0 when it does not load. */
int fd_tiny_config(bt_model_config *c);

/* Moves zero-, one- and half-initialized parameters (biases, LayerNorms, link beta) off their
 * init values by N(0, 0.05²), so that a missing term cannot hide behind a zero. */
void fd_move_off_init(bt_model *m, tu_rng *r);

/* v (numel) = a random direction over the tensors of field `only` (BT_P_COUNT: all), layer
 * `layer` (-1: all), each scaled by the rms of its tensor; 0 elsewhere. */
void fd_direction(const bt_param_table *t, const float *params, float *v, tu_rng *r,
                  bt_param_id only, int layer);

/* n losses of the model at its current parameters, into out[0..n-1]. */
typedef void (*fd_losses_fn)(bt_model *m, void *ctx, double *out);

/* ε from FD_EPS or 2.5e-3. */
double fd_eps(void);

/* For each loss k < n: fd[k] and an[k] along v, grads[k] (numel) its analytic gradient at θ.
 * Restores the parameters afterwards. */
void fd_along(bt_model *m, const float *v, int n, fd_losses_fn losses, void *ctx,
              float *const *grads, double *fd, double *an);

/* One case: |fd - an| <= 1e-2·|an| + 1e-4·max(1, |l0|). */
int fd_check(const char *label, const char *loss, double fd, double an, double l0);

#endif

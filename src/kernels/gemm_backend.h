/* gemm_backend.h: what gemm.c and its backends (gemm_ref.c, gemm_openblas.c,
 * gemm_onednn.c) share; not for use outside src/kernels/gemm*.c. The public interface is
 * gemm.h. */
#ifndef BT_GEMM_BACKEND_H
#define BT_GEMM_BACKEND_H

#include "kernels/gemm.h"

/* Backend entry points, called by gemm_with() after it validated g, resolved batch 0 to 1
 * and handled the empty and k == 0 cases. */
void gemm_ref_run(const gemm_args *g);
void gemm_openblas_run(const gemm_args *g);
int gemm_onednn_built(void);
/* The requested bf16 route (BT_GEMM_BF16, gemm_bf16_route_request; gemm.c keeps it); takes
 * effect for shapes not yet cached. */
gemm_bf16_route gemm_bf16_route_requested(void);
/* The route oneDNN runs bf16 on (never AUTO; resolves AUTO by measuring once), and the line
 * saying why (see gemm_bf16_route_active and gemm_bf16_route_describe). */
gemm_bf16_route gemm_onednn_bf16_route(void);
const char *gemm_onednn_bf16_describe(void);
int gemm_onednn_bf16_measure(double *native_s, double *fp32_s);
void gemm_onednn_run(const gemm_args *g);
/* Packed weights (gemm.h): bytes of the layout oneDNN's matmul reads W (out, in) of `type` in
 * as B = Wᵀ, 0 when it is the plain layout or larger than out * in elements; the in-place
 * pack. */
size_t gemm_onednn_packed_weight_bytes(bt_dtype type, size_t out, size_t in);
void gemm_onednn_pack_weight(void *w, bt_dtype type, size_t out, size_t in);
void gemm_onednn_release(void);
/* oneDNN's effective CPU ISA as dnnl_cpu_isa_t bits (0 when oneDNN is not built). */
unsigned gemm_onednn_cpu_isa(void);
/* A buffer of at least `bytes` owned by the calling thread, one per slot, kept (and grown)
 * across calls and freed by gemm_release(). Contents are undefined on return. */
enum {
    GEMM_SCRATCH_A,
    GEMM_SCRATCH_B,
    GEMM_SCRATCH_BIAS,
    GEMM_SCRATCH_DNNL,
    GEMM_SCRATCH_C, /* a dense C for bf16 products whose C is strided (gemm_onednn.c) */
    GEMM_SCRATCH_B_BLOCKED, /* B reordered into oneDNN's blocked layout (gemm_onednn.c) */
    GEMM_SCRATCH_CALLER, /* gemm_caller_scratch */
    GEMM_SCRATCH_SLOTS
};
void *gemm_thread_scratch(int slot, size_t bytes);

#endif

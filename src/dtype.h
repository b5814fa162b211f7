/* dtype.h: element types shared by checkpoints (safetensors), GEMM operands and inputs.
 *
 * bf16 is stored as its raw 16 bits (uint16_t). Scalar conversions live here; the
 * vectorized bulk conversions are kernels (src/kernels/ops.h: bf16_from_f32 / f32_from_bf16). */
#ifndef BT_DTYPE_H
#define BT_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum {
    BT_DTYPE_F32,
    BT_DTYPE_BF16,
    BT_DTYPE_F16,
    BT_DTYPE_F64,
    BT_DTYPE_I64,
    BT_DTYPE_I32,
    BT_DTYPE_I16,
    BT_DTYPE_I8,
    BT_DTYPE_U8,
    BT_DTYPE_BOOL,
    BT_DTYPE_UNKNOWN,
} bt_dtype;

typedef uint16_t bt_bf16;

/* Bytes per element (0 for BT_DTYPE_UNKNOWN). */
size_t bt_dtype_size(bt_dtype t);
/* safetensors spelling: "F32", "BF16", "F16", "F64", "I64", "I32", "I16", "I8", "U8", "BOOL". */
const char *bt_dtype_name(bt_dtype t);
/* Inverse of bt_dtype_name; BT_DTYPE_UNKNOWN for anything else. */
bt_dtype bt_dtype_from_name(const char *name);

/* fp32 -> bf16, round to nearest even; NaN stays a (quiet) NaN. */
static inline bt_bf16 bt_bf16_from_f32(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (bt_bf16)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (bt_bf16)(u >> 16);
}

static inline float bt_f32_from_bf16(bt_bf16 h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* IEEE half -> fp32 (exact, subnormals included). */
float bt_f32_from_f16(uint16_t h);

#endif

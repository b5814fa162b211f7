/* dtype.c: dtype names and sizes, half-precision decode. */
#include "dtype.h"

#include <math.h>

static const struct {
    bt_dtype type;
    const char *name;
    size_t size;
} dtype_table[] = {
    {BT_DTYPE_F32, "F32", 4}, {BT_DTYPE_BF16, "BF16", 2}, {BT_DTYPE_F16, "F16", 2},
    {BT_DTYPE_F64, "F64", 8}, {BT_DTYPE_I64, "I64", 8},   {BT_DTYPE_I32, "I32", 4},
    {BT_DTYPE_I16, "I16", 2}, {BT_DTYPE_I8, "I8", 1},     {BT_DTYPE_U8, "U8", 1},
    {BT_DTYPE_BOOL, "BOOL", 1},
};
enum { DTYPE_COUNT = sizeof dtype_table / sizeof dtype_table[0] };

size_t bt_dtype_size(bt_dtype t) {
    for (int i = 0; i < DTYPE_COUNT; i++)
        if (dtype_table[i].type == t) return dtype_table[i].size;
    return 0;
}

const char *bt_dtype_name(bt_dtype t) {
    for (int i = 0; i < DTYPE_COUNT; i++)
        if (dtype_table[i].type == t) return dtype_table[i].name;
    return "UNKNOWN";
}

bt_dtype bt_dtype_from_name(const char *name) {
    for (int i = 0; i < DTYPE_COUNT; i++)
        if (strcmp(dtype_table[i].name, name) == 0) return dtype_table[i].type;
    return BT_DTYPE_UNKNOWN;
}

float bt_f32_from_f16(uint16_t h) {
    int sign = (h >> 15) & 1;
    int exp = (h >> 10) & 0x1f;
    int mant = h & 0x3ff;
    float v;
    if (exp == 0) {
        v = ldexpf((float)mant, -24); /* subnormal: mant * 2^-24 */
    } else if (exp == 31) {
        v = mant ? NAN : INFINITY;
    } else {
        v = ldexpf((float)(mant | 0x400), exp - 25);
    }
    return sign ? -v : v;
}

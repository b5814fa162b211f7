/* test_status.c: the base layer: error messages, dtype names and bf16/f16 scalar rounding. */
#include <math.h>
#include <string.h>

#include "dtype.h"
#include "status.h"
#include "test_util.h"

int main(void) {
    bt_status s = bt_fail(BT_ERR_IO, "%s: cannot open", "x.json");
    tu_check(s == BT_ERR_IO && strcmp(bt_error_message(), "x.json: cannot open") == 0,
             "bt_fail records the message and returns the code");
    bt_fail_context(s, "loading model");
    tu_check(strcmp(bt_error_message(), "loading model: x.json: cannot open") == 0,
             "bt_fail_context prepends context: '%s'", bt_error_message());

    tu_check(bt_dtype_from_name("BF16") == BT_DTYPE_BF16 && bt_dtype_size(BT_DTYPE_BF16) == 2,
             "dtype names and sizes");
    tu_check(bt_dtype_from_name("Q4") == BT_DTYPE_UNKNOWN, "unknown dtype name");

    /* bf16 rounding to nearest even: 1 + 2^-8 is exactly halfway between 1 and 1 + 2^-7
     * and rounds to the even mantissa (1); 1 + 3*2^-8 rounds up to 1 + 2^-6. */
    tu_check(bt_f32_from_bf16(bt_bf16_from_f32(1.0f + 0x1p-8f)) == 1.0f, "bf16 tie to even (down)");
    tu_check(bt_f32_from_bf16(bt_bf16_from_f32(1.0f + 3 * 0x1p-8f)) == 1.0f + 0x1p-6f,
             "bf16 tie to even (up)");
    tu_check(isnan(bt_f32_from_bf16(bt_bf16_from_f32(NAN))), "bf16 keeps NaN");
    tu_check(isinf(bt_f32_from_bf16(bt_bf16_from_f32(INFINITY))), "bf16 keeps Inf");

    /* f16: 0x3c00 = 1, 0xc000 = -2, 0x0001 = 2^-24 (smallest subnormal), 0x7bff = 65504. */
    tu_check(bt_f32_from_f16(0x3c00) == 1.0f && bt_f32_from_f16(0xc000) == -2.0f &&
                 bt_f32_from_f16(0x0001) == 0x1p-24f && bt_f32_from_f16(0x7bff) == 65504.0f,
             "f16 decode (normal, negative, subnormal, max)");
    return tu_finish();
}

/* attention.h: what attention.c gives the kernel table in ops.c (src/kernels only): the fast
 * attention kernels of the unit's ISA level, and, in the library's unit, reading the
 * attention settings when the kernels are initialized. Callers use ops.h's
 * attention_forward / attention_backward, which dispatch to these.
 *
 * Deliberately not here: the interface and its contract (ops.h), the building blocks
 * (ops_blocks.h). */
#ifndef BT_KERNELS_ATTENTION_H
#define BT_KERNELS_ATTENTION_H

#include "kernels/ops.h"
#include "kernels/ops_blocks.h"
#include "kernels/ops_table.h"

/* Each kernel's function type, from the one list (ops_table.h): ops_kernel_fn_<name>. */
#define ATTENTION_KERNEL_TYPE(ret, name, params, args) typedef ret ops_kernel_fn_##name params;
OPS_KERNELS(ATTENTION_KERNEL_TYPE)
#undef ATTENTION_KERNEL_TYPE

/* attention_forward / attention_backward (ops.h) at this unit's level (OPS_LEVEL_NAME:
 * attention_forward_fast_scalar, _avx2, _avx512). */
ops_kernel_fn_attention_forward OPS_LEVEL_NAME(attention_forward_fast);
ops_kernel_fn_attention_backward OPS_LEVEL_NAME(attention_backward_fast);

#ifndef OPS_VARIANT
/* Reads BT_ATTENTION_THREADS and BT_ATTENTION_PRODUCTS (settings.h), warning on stderr about
 * a value it does not know and keeping "auto" then (for a library user that never calls the
 * check below; the tools refuse such a value first). Called once, by kernels_init. */
void attention_settings_init(void);
/* BT_OK when both are unset or one of their names; else BT_ERR_ARG naming the variable, the
 * value and the names (kernels_settings_check, ops.h). */
bt_status attention_settings_check(void);
#endif

#endif /* BT_KERNELS_ATTENTION_H */

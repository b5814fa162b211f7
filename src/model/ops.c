/* ops.c: placeholder until implemented. */

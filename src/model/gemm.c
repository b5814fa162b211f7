/* gemm.c: placeholder until implemented. */

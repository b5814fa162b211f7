/* gemm_openblas.c: placeholder until implemented. */

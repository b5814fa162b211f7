/* gemm_ref.c: placeholder until implemented. */

/* gemm_onednn.c: placeholder until implemented. */

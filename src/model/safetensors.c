/* safetensors.c: placeholder until implemented. */

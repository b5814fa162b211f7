/* ops_ref.c: placeholder until implemented. */

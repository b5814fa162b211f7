/* regress_main.c: replays inputs through a libFuzzer target without libFuzzer, so the normal
 * (gcc) build runs every fuzz target on its committed seed corpus and on every input that
 * once crashed it or ran past libFuzzer's time limit (tests/fixtures/fuzz/<target>/): a fixed
 * crash stays fixed.
 * Usage: fuzz_regress_<target> DIR... (every regular file of each DIR, in name order; a
 * missing DIR is fine, an empty total is a failure). Exit 0 when every input ran; a crash,
 * a sanitizer report or a failed property aborts (exit != 0). */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv) {
    size_t ran = 0;
    for (int a = 1; a < argc; a++) {
        DIR *d = opendir(argv[a]);
        if (!d) continue;
        char **names = NULL;
        size_t n = 0;
        for (struct dirent *e; (e = readdir(d));) {
            if (e->d_name[0] == '.') continue;
            names = realloc(names, (n + 1) * sizeof *names);
            names[n++] = strdup(e->d_name);
        }
        closedir(d);
        qsort(names, n, sizeof *names, cmp_str);
        for (size_t i = 0; i < n; i++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[a], names[i]);
            struct stat sb;
            FILE *f = stat(path, &sb) == 0 && S_ISREG(sb.st_mode) ? fopen(path, "rb") : NULL;
            if (f) {
                uint8_t *buf = malloc((size_t)sb.st_size + 1);
                size_t got = fread(buf, 1, (size_t)sb.st_size, f);
                fclose(f);
                printf("input %s (%zu bytes)\n", path, got);
                fflush(stdout);
                LLVMFuzzerTestOneInput(buf, got);
                free(buf);
                ran++;
            }
            free(names[i]);
        }
        free(names);
    }
    printf("%zu inputs replayed\n", ran);
    return ran ? 0 : 1;
}

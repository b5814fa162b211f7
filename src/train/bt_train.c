/* bt_train.c: the bt-train CLI, a thin main over bt_train_run (src/train/trainer.h):
 *
 *   bt-train --config FILE [--set key.path=value ...] [--resume DIR] [--quiet-config]
 *   bt-train --help-config          every run-config key with its type and default
 *
 * Exit status: 0 trained to the end; 1 error (the message names the key, file, record or
 * step); 2 usage error; 128 + the signal (130 SIGINT, 143 SIGTERM, 129 SIGHUP, 138 SIGUSR1,
 * 140 SIGUSR2) stopped by it after writing a checkpoint (the same command resumes it).
 *
 * Deliberately not here: anything the library does (trainer.h). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/cpu.h"
#include "fileio.h"
#include "mem.h"
#include "train/config.h"
#include "train/trainer.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: bt-train --config FILE [--set key.path=value ...] [--resume DIR]\n"
            "  --config FILE      run config (JSON; docs/config.md)\n"
            "  --set K=V          override one key after the file (repeatable), e.g.\n"
            "                     --set train.lr=2e-5 --set output.dir=out/run2\n"
            "  --resume DIR       resume from this checkpoint directory (same as\n"
            "                     --set output.resume_from=DIR); by default a run resumes\n"
            "                     from the latest checkpoint in output.dir\n"
            "  --quiet-config     do not print the resolved config at start\n"
            "  --help-config      list every config key, its type and default\n"
            "  --test-hook H=V    for bt's own tests only (tests/test_dist.c):\n"
            "                     sigterm_in_stop_check=STEP, dist_sleep=RANK:CONTEXT:SECONDS\n");
    bt_runtime_cli_help(out, 21);
}

static void help_config(void) {
    for (size_t i = 0; i < bt_run_config_n_keys(); i++) {
        char desc[256], def[256];
        bt_run_config_key_describe(i, desc, sizeof desc);
        bt_run_config_key_default(i, def, sizeof def);
        const char *hf = bt_run_config_key_hf(i);
        printf("%-36s %s (default %s)%s%s\n", bt_run_config_key(i), desc, def,
               hf[0] ? "; HF: " : "", hf);
    }
}

static int tool_main(int argc, char **argv) {
    bt_std_fds_guard(); /* fileio.h: closed 0-2 become /dev/null before any open */
    bt_runtime_prefer_start_environment(argv); /* cpu.h */
    const int info_rc = bt_runtime_cli_info(argc, argv, "bt-train"); /* --info (cpu.h) */
    if (info_rc >= 0) return info_rc;
    const char *config = NULL;
    const char **sets = calloc((size_t)argc + 1, sizeof *sets);
    char *resume_set = NULL;
    size_t n_sets = 0;
    int print_config = 1;
    long long test_sigterm = 0;
    const char *test_sleep = NULL;
    if (!sets) return 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            free(sets);
            return 0;
        } else if (!strcmp(a, "--help-config")) {
            help_config();
            free(sets);
            return 0;
        } else if (!strcmp(a, "--quiet-config")) {
            print_config = 0;
        } else if (!strcmp(a, "--test-hook") && i + 1 < argc) {
            const char *v = argv[++i];
            char *end = NULL;
            int ok = 0;
            if (!strncmp(v, "sigterm_in_stop_check=", 22)) {
                test_sigterm = strtoll(v + 22, &end, 10);
                ok = end != v + 22 && !*end;
            } else if (!strncmp(v, "dist_sleep=", 11)) {
                test_sleep = v + 11; /* checked by the trainer */
                ok = 1;
            }
            if (!ok) {
                fprintf(stderr, "bt-train: --test-hook %s: unknown hook or value\n", v);
                usage(stderr);
                free(sets);
                free(resume_set);
                return 2;
            }
        } else if ((!strcmp(a, "--config") || !strcmp(a, "--set") || !strcmp(a, "--resume")) &&
                   i + 1 < argc) {
            const char *v = argv[++i];
            if (!strcmp(a, "--config")) {
                config = v;
            } else if (!strcmp(a, "--set")) {
                sets[n_sets++] = v;
            } else {
                free(resume_set);
                resume_set = malloc(strlen(v) + 32);
                if (!resume_set) return 1;
                sprintf(resume_set, "output.resume_from=%s", v);
            }
        } else {
            fprintf(stderr, "bt-train: %s: unknown or incomplete option\n", a);
            usage(stderr);
            free(sets);
            free(resume_set);
            return 2;
        }
    }
    if (!config && n_sets == 0) {
        fprintf(stderr, "bt-train: --config FILE is required\n");
        usage(stderr);
        free(sets);
        return 2;
    }
    if (resume_set) sets[n_sets++] = resume_set;
    bt_train_options o = {
        .config_path = config, .sets = sets, .n_sets = n_sets, .print_config = print_config,
        .install_signals = 1, .out = stdout,
        .test_sigterm_in_stop_check = test_sigterm, .test_dist_sleep = test_sleep,
    };
    bt_train_outcome out;
    bt_status st = bt_train_run(&o, &out);
    free(sets);
    free(resume_set);
    fflush(stdout);
    int code = 0;
    if (st == BT_ERR_INTERRUPTED) {
        fprintf(stderr, "bt-train: %s\n", bt_error_message());
        code = 128 + (out.interrupted_by ? out.interrupted_by : SIGTERM);
    } else if (st != BT_OK) {
        fprintf(stderr, "bt-train: error: %s\n", bt_error_message());
        code = 1;
    }
    return code;
}

int main(int argc, char **argv) {
    return bt_mem_exit(tool_main(argc, argv)); /* mem.h: no hang at exit under ulimit -v */
}

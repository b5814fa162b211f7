/* bt_report.c: the bt-report CLI, a thin main over bt_report_write (src/train/report.h):
 *
 *   bt-report OUTPUT_DIR [--config FILE]
 *
 * (Re)builds OUTPUT_DIR/report.html from the metrics.jsonl and summary.json a bt-train run
 * left there, also for a run that is still going or was killed; --config adds the run config
 * (a JSON object, e.g. the resolved config bt-train printed or stored) as a table.
 * Exit status: 0 ok; 1 error (message naming the file and line); 2 usage error.
 *
 * Deliberately not here: anything the library does not do (report.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fileio.h"
#include "json_util.h"
#include "kernels/cpu.h"
#include "train/report.h"
#include "mem.h"

/* The usage on `out`; returns the exit status (0 for --help on stdout, 2 for a usage error). */
static int usage(FILE *out, int rc) {
    fprintf(out,
            "usage: bt-report OUTPUT_DIR [--config FILE]\n"
            "(Re)builds OUTPUT_DIR/report.html from the metrics.jsonl and summary.json a\n"
            "bt-train run left there (also for a run still going or killed).\n"
            "  --config FILE   add the run config (a JSON object) as a table\n"
            "  --help          this text\n");
    bt_runtime_cli_help(out, 18);
    return rc;
}

static int tool_main(int argc, char **argv) {
    bt_std_fds_guard(); /* fileio.h: closed 0-2 become /dev/null before any open */
    const int info_rc = bt_runtime_cli_info(argc, argv, "bt-report"); /* --version (cpu.h) */
    if (info_rc >= 0) return info_rc;
    const char *dir = NULL, *config_path = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
            config_path = argv[++i];
        else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return usage(stdout, 0);
        else if (argv[i][0] == '-' || dir) {
            fprintf(stderr, "bt-report: unexpected argument '%s'\n", argv[i]);
            return usage(stderr, 2);
        } else
            dir = argv[i];
    }
    if (!dir) return usage(stderr, 2);
    char *config = NULL;
    bt_status st = config_path ? bt_json_read_text(config_path, "run config", &config) : BT_OK;
    if (st == BT_OK) st = bt_report_write(dir, config);
    free(config);
    if (st != BT_OK) {
        fprintf(stderr, "bt-report: error: %s\n", bt_error_message());
        return 1;
    }
    printf("bt-report: wrote %s/report.html\n", dir);
    return 0;
}

int main(int argc, char **argv) {
    return bt_mem_exit(tool_main(argc, argv)); /* mem.h: no hang at exit under ulimit -v */
}

/* train/state.c: checkpoint directories for resume (see train/state.h, docs/resume.md).
 *
 * Deliberately not here: the training loop and its cadences; the model directory format
 * itself (model/checkpoint.c writes it; this file only stages it in a temp directory);
 * trainer_state.json's reader and writer (train/trainer_state.c). */
#include "train/state.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fileio.h"
#include "json_util.h"
#include "safetensors.h"

#define STATE_FILE "trainer_state.json"
#define OPTIM_FILE "optimizer.safetensors"

/* ------------------------------------------------------------------------------------------
 * optimizer.safetensors */

static void moment_name(char *out, size_t cap, const char *which, const bt_param_tensor *x) {
    snprintf(out, cap, "%s.%s", which, x->key);
}

bt_status bt_optim_state_save(const char *path, const bt_param_table *t, const bt_adamw *o) {
    BT_ASSERT(o->numel == t->numel && !o->sharded); /* ZeRO-1: gathered first (step.h) */
    size_t cap = 2 * t->n_tensors + 1, n = 0;
    safetensors_entry *e = calloc(cap, sizeof *e);
    char (*names)[BT_PARAM_KEY_MAX + 16] = calloc(cap, sizeof *names);
    BT_ASSERT(e && names);
    int64_t step = (int64_t)o->t;
    e[n] = (safetensors_entry){.name = "step", .dtype = BT_DTYPE_I64, .src_dtype = BT_DTYPE_I64,
                               .ndim = 0, .data = &step};
    n++;
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < t->n_tensors; i++) {
            const bt_param_tensor *x = &t->tensors[i];
            float *m, *v;
            if (!bt_adamw_moments(o, x->offset, &m, &v)) continue; /* frozen: no moments */
            moment_name(names[n], sizeof names[n], pass ? "exp_avg_sq" : "exp_avg", x);
            e[n] = (safetensors_entry){.name = names[n], .dtype = BT_DTYPE_F32,
                                       .src_dtype = BT_DTYPE_F32, .ndim = x->ndim,
                                       .data = pass ? v : m};
            memcpy(e[n].shape, x->shape, sizeof x->shape);
            n++;
        }
    }
    static const char *const meta[] = {"format", "pt", "bt_optimizer", "adamw", NULL};
    bt_status st = safetensors_write(path, e, n, meta);
    free(e);
    free(names);
    return st;
}

/* The part of moment tensor x (F32 values at data, x's shape) that o holds: every piece of
 * o's segments inside the tensor (all of it unsharded; a ZeRO-1 shard's blocks of it
 * otherwise), straight from the mapping: nothing else of the file is read. */
static void read_pieces(const bt_adamw *o, const bt_param_tensor *x, const uint8_t *data,
                        float *arena) {
    const size_t lo = x->offset, hi = x->offset + x->numel;
    for (size_t s = 0; s < o->n_segs; s++) {
        const bt_optim_segment *g = &o->segs[s];
        if (g->frozen || g->offset >= hi || g->offset + g->numel <= lo) continue;
        const size_t a = g->offset > lo ? g->offset : lo;
        const size_t b = g->offset + g->numel < hi ? g->offset + g->numel : hi;
        memcpy(arena + g->moff + (a - g->offset), data + 4 * (a - lo), (b - a) * 4);
    }
}

/* A moment read from a file must be one AdamW could have written: finite, and a second
 * moment (a running mean of squares) never negative; otherwise the first resumed step turns
 * it into a NaN loss steps later ("loss_itc is NaN at step 6") instead of naming the file. */
static bt_status check_moment(const char *path, const char *name, const safetensors_tensor *ft,
                              int second) {
    const unsigned char *p = ft->data;
    for (size_t k = 0; k < ft->numel; k++) {
        float v;
        memcpy(&v, p + k * sizeof v, sizeof v);
        if (!isfinite(v) || (second && v < 0))
            return bt_fail(BT_ERR_NUMERIC, "%s: tensor '%s' holds %g at element %zu; expected "
                           "%s: the optimizer state is corrupt (resume from an earlier "
                           "checkpoint)", path, name, (double)v, k,
                           second ? "finite values >= 0 (a mean of squared gradients)"
                                  : "finite values");
    }
    return BT_OK;
}

bt_status bt_optim_state_load(const char *path, const bt_param_table *t, bt_adamw *o) {
    BT_ASSERT(o->numel == t->numel);
    safetensors_file f;
    bt_status st = safetensors_open(&f, path);
    if (st != BT_OK) return st;
    size_t used = 0;
    const safetensors_tensor *stp = safetensors_find(&f, "step");
    if (!stp || stp->dtype != BT_DTYPE_I64 || stp->ndim != 0) {
        st = bt_fail(BT_ERR_FORMAT, "%s: tensor 'step': %s; expected a 0-d I64 step count",
                     path, stp ? "wrong dtype or shape" : "missing");
        goto done;
    }
    int64_t step;
    memcpy(&step, stp->data, sizeof step);
    if (step < 0) {
        st = bt_fail(BT_ERR_FORMAT, "%s: tensor 'step' is %lld; expected >= 0", path,
                     (long long)step);
        goto done;
    }
    used++;
    /* the moments arenas are compact over the trained tensors; gaps (alignment) stay 0 */
    memset(o->m, 0, o->mnumel * sizeof *o->m);
    memset(o->v, 0, o->mnumel * sizeof *o->v);
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < t->n_tensors; i++) {
            const bt_param_tensor *x = &t->tensors[i];
            if (!bt_adamw_trained_at(o, x->offset)) continue; /* frozen: no moments */
            char name[BT_PARAM_KEY_MAX + 16];
            moment_name(name, sizeof name, pass ? "exp_avg_sq" : "exp_avg", x);
            const safetensors_tensor *ft = safetensors_find(&f, name);
            if (!ft) {
                st = bt_fail(BT_ERR_MISSING,
                             "%s: tensor '%s' missing (the moments of a trained parameter); "
                             "the file does not belong to this model",
                             path, name);
                goto done;
            }
            char want_s[64], got_s[64];
            safetensors_shape_str(want_s, sizeof want_s, x->ndim, x->shape);
            safetensors_shape_str(got_s, sizeof got_s, ft->ndim, ft->shape);
            if (ft->dtype != BT_DTYPE_F32 || strcmp(want_s, got_s)) {
                st = bt_fail(ft->dtype != BT_DTYPE_F32 ? BT_ERR_FORMAT : BT_ERR_SHAPE,
                             "%s: tensor '%s': expected F32 of shape %s (%zu values), found %s "
                             "of shape %s (%zu values)",
                             path, name, want_s, x->numel, bt_dtype_name(ft->dtype), got_s,
                             ft->numel);
                goto done;
            }
            st = check_moment(path, name, ft, pass);
            if (st != BT_OK) goto done;
            read_pieces(o, x, ft->data, pass ? o->v : o->m);
            used++;
        }
    }
    if (used != f.n_tensors) {
        /* name the first tensor the model has no moments for */
        for (size_t i = 0; i < f.n_tensors; i++) {
            const char *name = f.tensors[i].name;
            const char *dot = strchr(name, '.');
            const bt_param_tensor *x = NULL;
            if (dot && (!strncmp(name, "exp_avg.", 8) || !strncmp(name, "exp_avg_sq.", 11)))
                x = bt_param_table_find(t, dot + 1);
            if (!strcmp(name, "step") || (x && bt_adamw_trained_at(o, x->offset))) continue;
            st = bt_fail(BT_ERR_FORMAT,
                         "%s: tensor '%s': not a moment of a trained parameter of this model "
                         "(%s)",
                         path, name, x ? "the parameter is frozen in this run" : "unknown key");
            goto done;
        }
    }
    o->t = (uint64_t)step;
done:
    safetensors_close(&f);
    return st;
}

/* ------------------------------------------------------------------------------------------
 * Directories */

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p) != 0 ? -1 : 0;
}

/* rm -r dir (no symlinks followed). 0 or -1 with errno. */
static int remove_tree(const char *dir) {
    return nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* "checkpoint-<digits>" -> step, else -1. */
static int64_t checkpoint_step(const char *name) {
    if (strncmp(name, "checkpoint-", 11) || !name[11]) return -1;
    int64_t step = 0;
    for (const char *p = name + 11; *p; p++) {
        if (*p < '0' || *p > '9' || step > (INT64_MAX - 9) / 10) return -1;
        step = step * 10 + (*p - '0');
    }
    return step;
}

/* "tmp-checkpoint-...<.pid>" -> pid, else -1. */
static long temp_pid(const char *name) {
    if (strncmp(name, "tmp-checkpoint-", 15)) return -1;
    const char *dot = strrchr(name, '.');
    if (!dot || !dot[1]) return -1;
    char *end;
    long pid = strtol(dot + 1, &end, 10);
    return *end || pid <= 0 ? -1 : pid;
}

static int is_dir(const char *path) {
    struct stat sb;
    return lstat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static int is_regular(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

static const char *const complete_files[] = {STATE_FILE, OPTIM_FILE, "config.json",
                                             "model.safetensors", NULL};

static int checkpoint_complete(const char *dir) {
    char p[4300];
    for (size_t i = 0; complete_files[i]; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, complete_files[i]);
        if (!is_regular(p)) return 0;
    }
    return 1;
}

bt_status bt_train_checkpoint_clean_stale(const char *output_dir, size_t *n_removed) {
    if (n_removed) *n_removed = 0;
    DIR *d = opendir(output_dir);
    if (!d) {
        if (errno == ENOENT) return BT_OK;
        return bt_fail(BT_ERR_IO, "%s: cannot list the output directory: %s", output_dir,
                       strerror(errno));
    }
    bt_status st = BT_OK;
    struct dirent *e;
    while ((e = readdir(d))) {
        long pid = temp_pid(e->d_name);
        if (pid < 0) continue;
        /* alive and not us: another process is writing it */
        if (pid != (long)getpid() && (kill((pid_t)pid, 0) == 0 || errno == EPERM)) continue;
        char p[4200];
        snprintf(p, sizeof p, "%s/%s", output_dir, e->d_name);
        if (!is_dir(p)) continue;
        if (remove_tree(p) != 0) {
            st = bt_fail(BT_ERR_IO, "%s: cannot remove a stale temp directory: %s", p,
                         strerror(errno));
            break;
        }
        if (n_removed) (*n_removed)++;
    }
    closedir(d);
    return st;
}

typedef struct ck_entry {
    int64_t step;
    char name[64];
} ck_entry;

static int ck_cmp(const void *a, const void *b) {
    int64_t x = ((const ck_entry *)a)->step, y = ((const ck_entry *)b)->step;
    return (x > y) - (x < y);
}

/* checkpoint-<N> directories of output_dir, sorted by step. *list malloc'd. */
static bt_status list_checkpoints(const char *output_dir, ck_entry **list, size_t *n) {
    *list = NULL;
    *n = 0;
    DIR *d = opendir(output_dir);
    if (!d) {
        if (errno == ENOENT) return BT_OK;
        return bt_fail(BT_ERR_IO, "%s: cannot list the output directory: %s", output_dir,
                       strerror(errno));
    }
    size_t cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        int64_t step = checkpoint_step(e->d_name);
        if (step < 0 || strlen(e->d_name) >= sizeof((ck_entry *)0)->name) continue;
        char p[4200];
        snprintf(p, sizeof p, "%s/%s", output_dir, e->d_name);
        if (!is_dir(p)) continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            ck_entry *nl = realloc(*list, cap * sizeof *nl);
            BT_ASSERT(nl);
            *list = nl;
        }
        (*list)[*n].step = step;
        snprintf((*list)[*n].name, sizeof (*list)[*n].name, "%s", e->d_name);
        (*n)++;
    }
    closedir(d);
    if (*n) qsort(*list, *n, sizeof **list, ck_cmp);
    return BT_OK;
}

bt_status bt_train_checkpoint_latest(const char *output_dir, char *out, size_t cap, int *found,
                                     size_t *n_incomplete) {
    *found = 0;
    if (n_incomplete) *n_incomplete = 0;
    bt_status st = bt_train_checkpoint_clean_stale(output_dir, NULL);
    if (st != BT_OK) return st;
    ck_entry *list;
    size_t n;
    if ((st = list_checkpoints(output_dir, &list, &n)) != BT_OK) return st;
    for (size_t i = n; i-- > 0;) {
        char p[4200];
        snprintf(p, sizeof p, "%s/%s", output_dir, list[i].name);
        if (!checkpoint_complete(p)) {
            if (n_incomplete) (*n_incomplete)++;
            continue;
        }
        if (snprintf(out, cap, "%s", p) >= (int)cap) {
            free(list);
            return bt_fail(BT_ERR_ARG, "%s: path too long", p);
        }
        *found = 1;
        break;
    }
    free(list);
    return BT_OK;
}

/* Deletes one checkpoint: renamed aside first, so no half checkpoint-<N> is ever seen. */
static bt_status delete_checkpoint(const char *output_dir, const char *name) {
    char from[4200], to[4200];
    snprintf(from, sizeof from, "%s/%s", output_dir, name);
    snprintf(to, sizeof to, "%s/tmp-%s.deleting.%ld", output_dir, name, (long)getpid());
    if (rename(from, to) != 0)
        return bt_fail(BT_ERR_IO, "%s: cannot rename for deletion: %s", from, strerror(errno));
    if (remove_tree(to) != 0)
        return bt_fail(BT_ERR_IO, "%s: cannot remove (old checkpoint %s): %s", to, name,
                       strerror(errno));
    return BT_OK;
}

static int same_dir(const char *a, const char *b) {
    struct stat sa, sb;
    return a && b && stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

static bt_status rotate(const char *output_dir, int64_t keep_last, const char *keep,
                        const char *keep_also) {
    if (keep_last <= 0) return BT_OK;
    ck_entry *list;
    size_t n;
    bt_status st = list_checkpoints(output_dir, &list, &n);
    if (st != BT_OK) return st;
    /* newest keep_last stay; older ones go unless protected */
    for (size_t i = 0; st == BT_OK && n > (size_t)keep_last && i < n - (size_t)keep_last; i++) {
        char p[4200];
        snprintf(p, sizeof p, "%s/%s", output_dir, list[i].name);
        if (same_dir(p, keep) || same_dir(p, keep_also)) continue;
        st = delete_checkpoint(output_dir, list[i].name);
    }
    free(list);
    return st;
}

static bt_status fsync_dir(const char *dir) {
    int err = bt_sync_dir_of(dir, 1);
    return err ? bt_fail(BT_ERR_IO, "%s: fsync: %s", dir, strerror(err)) : BT_OK;
}

bt_status bt_train_checkpoint_save(const char *output_dir, const bt_train_checkpoint *c,
                                   int64_t total_limit, const char *keep_also, char *saved,
                                   size_t cap) {
    BT_ASSERT(c && c->table && c->params && c->optim && c->state);
    const int64_t step = c->state->global_step;
    char tmp[4200], final[4200], p[4300];
    if (snprintf(final, sizeof final, "%s/checkpoint-%lld", output_dir, (long long)step) >=
        (int)sizeof final)
        return bt_fail(BT_ERR_ARG, "%.60s...: output directory path too long", output_dir);
    snprintf(tmp, sizeof tmp, "%s/tmp-checkpoint-%lld.%ld", output_dir, (long long)step,
             (long)getpid());
    bt_status st = bt_make_dirs(output_dir, "output directory");
    if (st == BT_OK) st = bt_train_checkpoint_clean_stale(output_dir, NULL);
    if (st != BT_OK) return st;
    if (mkdir(tmp, 0755) != 0)
        return bt_fail(BT_ERR_IO, "%s: cannot create the temp checkpoint directory: %s", tmp,
                       strerror(errno));

    bt_checkpoint_save_options so;
    bt_checkpoint_save_options_default(&so);
    so.dtype = c->dtype;
    so.base_config_json = c->base_config_json;
    so.copy_from_dir = c->copy_from_dir;
    st = bt_checkpoint_save(tmp, c->table, c->params, &so);
    if (st == BT_OK) {
        snprintf(p, sizeof p, "%s/%s", tmp, OPTIM_FILE);
        st = bt_optim_state_save(p, c->table, c->optim);
    }
    if (st == BT_OK) {
        /* last: its presence marks a complete directory even without the rename */
        snprintf(p, sizeof p, "%s/%s", tmp, STATE_FILE);
        st = bt_train_state_write(p, c->state);
    }
    if (st == BT_OK) st = fsync_dir(tmp);
    if (st == BT_OK) {
        if (is_dir(final)) {
            /* re-saving a step (e.g. a signal right after resuming): swap atomically, then
             * delete the old one, which now sits under the temp name */
            if (renameat2(AT_FDCWD, tmp, AT_FDCWD, final, RENAME_EXCHANGE) != 0) {
                /* file systems without RENAME_EXCHANGE: move the old one aside first (a
                 * crash in between loses this step's checkpoint, never an earlier one) */
                char aside[4300];
                snprintf(aside, sizeof aside, "%s/tmp-checkpoint-%lld.replaced.%ld", output_dir,
                         (long long)step, (long)getpid());
                if (errno != EINVAL && errno != ENOSYS)
                    st = bt_fail(BT_ERR_IO, "%s: cannot swap in the new checkpoint %s: %s", final,
                                 tmp, strerror(errno));
                else if (rename(final, aside) != 0 || rename(tmp, final) != 0)
                    st = bt_fail(BT_ERR_IO, "%s: cannot replace it with %s: %s", final, tmp,
                                 strerror(errno));
                else
                    remove_tree(aside);
            }
        } else if (rename(tmp, final) != 0) {
            st = bt_fail(BT_ERR_IO, "%s: cannot rename to %s: %s", tmp, final, strerror(errno));
        }
    }
    if (st != BT_OK) {
        bt_status keep = st;
        remove_tree(tmp); /* best effort: the next save removes what is left */
        return bt_fail_context(keep, "saving %s (earlier checkpoints are untouched)", final);
    }
    remove_tree(tmp); /* the swapped-out old copy, if any */
    if ((st = fsync_dir(output_dir)) != BT_OK) return st;
    if (saved && snprintf(saved, cap, "%s", final) >= (int)cap)
        return bt_fail(BT_ERR_ARG, "%s: path too long for the caller's buffer", final);
    st = rotate(output_dir, total_limit, final, keep_also);
    if (st != BT_OK) return bt_fail_context(st, "%s saved, but rotating old checkpoints", final);
    return fsync_dir(output_dir);
}

/* ------------------------------------------------------------------------------------------
 * Loading for resume */

bt_optim_groups bt_run_config_optim_groups(const bt_run_config *c) {
    bt_optim_groups g = bt_optim_groups_default();
    g.lr_mult_cross = c->train.lr_mult.cross_modal;
    g.lr_mult_heads = c->train.lr_mult.heads;
    g.freeze_text = c->train.freeze_text;
    g.freeze_vision = c->train.freeze_vision;
    return g;
}

const char *bt_model_config_shape_diff(const bt_model_config *a, const bt_model_config *b,
                                       long *va, long *vb) {
    /* the fields that decide the parameter table's shapes, by their HF config names */
    static const struct {
        const char *hf;
        size_t off;
    } f[] = {
#define SF_(hf, m) {hf, offsetof(bt_model_config, m)}
        SF_("text_config.vocab_size", vocab_size),
        SF_("text_config.hidden_size", text_hidden),
        SF_("text_config.num_hidden_layers", text_layers),
        SF_("text_config.num_attention_heads", text_heads),
        SF_("text_config.intermediate_size", text_intermediate),
        SF_("text_config.max_position_embeddings", max_position_embeddings),
        SF_("text_config.type_vocab_size", type_vocab_size),
        SF_("vision_config.hidden_size", vision_hidden),
        SF_("vision_config.num_hidden_layers", vision_layers),
        SF_("vision_config.num_channels", num_channels),
        SF_("vision_config.patch_size", patch_size),
        SF_("vision_config.image_size", image_size),
        SF_("hidden_size", hidden),
        SF_("num_hidden_layers", cross_layers),
        SF_("contrastive_hidden_size", contrastive_hidden),
#undef SF_
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        int x = *(const int *)((const char *)a + f[i].off);
        int y = *(const int *)((const char *)b + f[i].off);
        if (x != y) {
            *va = x;
            *vb = y;
            return f[i].hf;
        }
    }
    if (a->link_tower_type != b->link_tower_type) {
        *va = (long)a->link_tower_type;
        *vb = (long)b->link_tower_type;
        return "link_tower_type";
    }
    return NULL;
}

void bt_train_resume_free(bt_train_resume *r) {
    bt_checkpoint_weights_free(&r->model);
    if (r->optim.segs) bt_adamw_free(&r->optim);
    bt_train_state_free(&r->state);
    memset(r, 0, sizeof *r);
}

bt_status bt_train_checkpoint_load_state(const char *dir, const bt_model_config *expect,
                                         bt_train_resume *r) {
    memset(r, 0, sizeof *r);
    bt_train_state_init(&r->state);
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", dir, STATE_FILE);
    bt_status st = bt_train_state_read(p, &r->state);
    if (st != BT_OK) goto fail;

    bt_checkpoint_load_options lo;
    bt_checkpoint_load_options_default(&lo);
    lo.heads = r->state.run_config.model.heads;
    bt_checkpoint_report rep;
    bt_checkpoint_report_init(&rep);
    st = bt_checkpoint_load(&r->model, dir, &lo, &rep);
    if (st == BT_OK && rep.initialized.n) {
        /* resuming must not invent weights: every trained head must be in the file */
        st = bt_fail(BT_ERR_MISSING,
                     "%s/model.safetensors: head '%s' is missing, but the run trains it (%s "
                     "lists it in run_config.model.heads)",
                     dir, rep.initialized.names[0], STATE_FILE);
    }
    bt_checkpoint_report_free(&rep);
    if (st != BT_OK) goto fail;
    if (expect) {
        long va, vb;
        const char *key = bt_model_config_shape_diff(&r->model.cfg, expect, &va, &vb);
        if (key) {
            st = bt_fail(BT_ERR_CONFIG,
                         "%s/config.json: %s is %ld in the checkpoint, %ld in this run's model; "
                         "resume with the model the checkpoint was trained from",
                         dir, key, va, vb);
            goto fail;
        }
    }
    return BT_OK;
fail:
    bt_train_resume_free(r);
    return st;
}

bt_status bt_train_checkpoint_load(const char *dir, const bt_optim_groups *groups,
                                   const bt_model_config *expect, bt_train_resume *r) {
    bt_status st = bt_train_checkpoint_load_state(dir, expect, r);
    if (st != BT_OK) return st;
    bt_optim_groups g = groups ? *groups : bt_run_config_optim_groups(&r->state.run_config);
    bt_adamw_init_groups(&r->optim, &r->model.table, &g);
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", dir, OPTIM_FILE);
    st = bt_optim_state_load(p, &r->model.table, &r->optim);
    if (st != BT_OK) bt_train_resume_free(r);
    return st;
}

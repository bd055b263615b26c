/* cli/cmd_merge.c: `kforge db merge A.db B.db -o ALL.db`: join tuning results, conflicting winners go to the better-measured */
#include "cli/cli.h"
#include "tuner/tune_select.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct merge_ctx {
    const cli_opts *o;
    const char *src;
    long conflicts;
} merge_ctx;

static double rel(const db_tune_side *s)
{
    return s->w.median_ms > 0 ? s->spread_ms / s->w.median_ms : NAN;
}

static int resolve(const db_tune_side *a, const db_tune_side *b, void *arg)
{
    merge_ctx *c = arg;
    tune_merge_side x = {a->n_samples, a->w.median_ms, a->spread_ms};
    tune_merge_side y = {b->n_samples, b->w.median_ms, b->spread_ms};
    int take_b = tune_merge_prefer(&x, &y);
    if (strcmp(a->w.variant_key, b->w.variant_key)) {
        const db_tune_side *k = take_b ? b : a, *d = take_b ? a : b;
        c->conflicts++;
        if (!c->o->quiet)
            fprintf(stderr, "conflict: %s %s %s: kept %s (%.4f ms, %d samples, spread %.1f%%, from %s)"
                    " over %s (%.4f ms, %d samples, spread %.1f%%)\n", a->w.gpu, a->w.family, a->w.shape_key,
                    k->w.variant_key, k->w.median_ms, k->n_samples, 100 * rel(k), take_b ? c->src : "the output",
                    d->w.variant_key, d->w.median_ms, d->n_samples, 100 * rel(d));
    }
    return take_b;
}

static int same_file(const char *a, const char *b)
{
    char ra[PATH_MAX], rb[PATH_MAX];
    if (!realpath(a, ra) || !realpath(b, rb))
        return !strcmp(a, b);
    return !strcmp(ra, rb);
}

/* o->argv: "merge" A.db [B.db ...]; -o OUT.db */
int cmd_db_merge(cli_opts *o)
{
    const char *out = o->output;
    char **in = o->argv + 1;
    int n = o->argc - 1;
    if (o->db_path)
        return cli_usage_error("'kforge db merge' writes to -o OUT.db, not --db");
    if (!out)
        return cli_usage_error("'kforge db merge' needs -o OUT.db");
    if (n < 1)
        return cli_usage_error("'kforge db merge' needs at least one input database");
    for (int i = 0; i < n; i++) {
        if (same_file(in[i], out))
            return cli_usage_error("input '%s' is the output database", in[i]);
        if (access(in[i], R_OK))
            return cli_error("cannot open database '%s': %s", in[i], strerror(errno));
    }
    cli_opts oo = *o;
    oo.db_path = out;
    db_store *db = cli_open_db(&oo, 1);
    if (!db)
        return 1;
    int rc = 0;
    /* every input checked before the first is merged: a bad one merges none (each merge is
     * then its own transaction; a write failing midway leaves the inputs before it merged) */
    for (int i = 0; i < n && !rc; i++)
        if (db_tune_merge_check(db, in[i]) != DB_OK)
            rc = cli_error("%s", db_errmsg(db));
    if (rc) {
        db_close(db);
        return rc;
    }
    if (o->json)
        printf("[");
    for (int i = 0; i < n && !rc; i++) {
        merge_ctx c = {o, in[i], 0};
        db_tune_merge_stats st;
        if (db_tune_merge(db, in[i], resolve, &c, &st) != DB_OK) {
            rc = cli_error("%s", db_errmsg(db));
            break;
        }
        char ji[4096];
        if (o->json)
            printf("%s\n {\"input\":%s,\"templates\":%lld,\"binaries\":%lld,\"runs\":%lld,"
                   "\"measurements\":%lld,\"ceilings\":%lld,\"winners_added\":%lld,\"winners_replaced\":%lld,"
                   "\"winners_kept\":%lld,\"conflicts\":%lld}", i ? "," : "", gen_json_str(ji, sizeof ji, in[i]),
                   st.templates, st.binaries, st.runs, st.measurements, st.ceilings, st.winners_added,
                   st.winners_replaced, st.winners_kept, st.conflicts);
        else
            printf("%s: %lld runs, %lld measurements, %lld new binaries; winners: %lld added, %lld replaced,"
                   " %lld kept (%lld conflicts)\n", in[i], st.runs, st.measurements, st.binaries,
                   st.winners_added, st.winners_replaced, st.winners_kept, st.conflicts);
    }
    if (o->json)
        printf("\n]\n");
    db_close(db);
    return rc;
}

/* cli/cmd_tune.c: `kforge tune`: sweeps on one worker process per GPU, shards, resume */
#include "cli/cli.h"
#include "gen/sweep.h"
#include "runtime/cuda.h"
#include "runtime/family.h"
#include "tuner/attn_run.h"
#include "tuner/tune_enum.h"
#include "tuner/tune_select.h"
#include "tuner/tune_split.h"
#include "tuner/tune_sweep.h"
#include "tuner/tune_work.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kf_rev.h"

#define TUNE_MAX_DEVICES 64
#define TUNE_EXIT_RESTART 75     /* a worker whose CUDA context broke: the parent starts it again */
#define TUNE_MAX_RESTARTS 100

static volatile sig_atomic_t g_stop;

static void on_sigint(int sig)
{
    if (g_stop)
        signal(sig, SIG_DFL), raise(sig);  /* a second Ctrl-C: stop now */
    g_stop = 1;
}

/* The tunable shapes of the selection (the families the family table marks tuned), shard si of sn's part
 * (sn 0: all of them). */
static int tune_shapes(cli_opts *o, int si, int sn, gen_kvset **out)
{
    gen_host *h = cli_host(o);
    if (!h)
        return -1;
    const char *family = o->argc > 0 ? o->argv[0] : NULL;
    gen_kvset *all;
    int n = cli_shapes(o, h, family, &all);
    gen_host_free(h);
    if (n < 0)
        return -1;
    int m = 0, skipped = 0;
    for (int i = 0; i < n; i++) {
        const rt_family *f = rt_family_of(&all[i]);
        if (f && f->tuned)
            all[m++] = all[i];
        else
            skipped++;
    }
    if (skipped) {
        char names[256];
        rt_family_list(1, names, sizeof names);
        cli_progress(o, "note: %d shape%s of families the tuner does not time (only %s) left out\n", skipped,
                     skipped == 1 ? "" : "s", names);
    }
    if (sn > 0) {
        double *cost = malloc(sizeof(double) * (size_t)(m + 1));
        int *owner = malloc(sizeof(int) * (size_t)(m + 1));
        for (int i = 0; i < m; i++)
            cost[i] = tune_cost_estimate(gen_kv_str(&all[i], "family"), &all[i]);
        tune_split(cost, m, sn, owner);
        int k = 0;
        for (int i = 0; i < m; i++)
            if (owner[i] == si)
                all[k++] = all[i];
        m = k;
        free(cost);
        free(owner);
    }
    *out = all;
    return m;
}

/* The part of shapes worker w of devs does: shapes are shared among the GPUs of one model. */
static int worker_shapes(const int *devs, int nd, int w, gen_kvset *shapes, int n)
{
    const char *models[TUNE_MAX_DEVICES];
    static rt_devinfo info[TUNE_MAX_DEVICES];
    core_err err = CORE_ERR_INIT;
    for (int i = 0; i < nd; i++) {
        if (rt_device_info(devs[i], &info[i], &err))
            snprintf(info[i].name, sizeof info[i].name, "unknown-%d", devs[i]);
        models[i] = info[i].name;
    }
    int rank, peers;
    tune_worker_rank(models, nd, w, &rank, &peers);
    if (peers <= 1)
        return n;
    double *cost = malloc(sizeof(double) * (size_t)(n + 1));
    int *owner = malloc(sizeof(int) * (size_t)(n + 1));
    for (int i = 0; i < n; i++)
        cost[i] = tune_cost_estimate(gen_kv_str(&shapes[i], "family"), &shapes[i]);
    tune_split(cost, n, peers, owner);
    int k = 0;
    for (int i = 0; i < n; i++)
        if (owner[i] == rank)
            shapes[k++] = shapes[i];
    free(cost);
    free(owner);
    return k;
}

/* One worker (a child process): returns its exit code. */
static int worker(cli_opts *cli, const int *devs, int nd, int w, gen_kvset *shapes, int n)
{
    n = worker_shapes(devs, nd, w, shapes, n);
    const char *path = cli->db_path ? cli->db_path : getenv("KFORGE_DB");
    char label[32];
    snprintf(label, sizeof label, "gpu%d", devs[w]);
    tune_opts o = {0};
    o.db_path = path && *path ? path : "kforge.db";
    o.templates = cli->templates;
    o.arch = cli->arch;
    o.ordinal = devs[w];
    o.jobs = cli->jobs;
    o.samples = cli->samples;
    o.budget = cli->budget;
    o.strategy = cli->strategy ? tune_strategy_parse(cli->strategy) : TUNE_STRAT_RANDOM;
    o.seed = cli->seed;
    o.band_floor = cli->band_floor;
    o.rewarm_ms = cli->rewarm_ms;
    o.timing = cli->timing ? tune_timing_parse(cli->timing) : TUNE_TIMING_SUSTAINED;
    o.retry_errors = cli->retry_errors;
    o.quiet = cli->quiet;
    o.json = cli->json;
    o.label = nd > 1 ? label : NULL;
    o.command = cli->command ? cli->command : "kforge tune";
    o.kforge_rev = KF_GIT_REV;
    o.stop = &g_stop;
    tune_stats st;
    core_err err = CORE_ERR_INIT;
    int rc = tune_sweep_run(&o, shapes, n, &st, &err);
    if (!cli->json && (rc != -1 || st.measured || st.resumed))
        printf("%s%s%d shape%s tuned, %d failed; %ld variants: %ld measured, %ld resumed, %ld wrong,"
               " %ld errors; %ld winners, %ld faster than the default%s\n",
               o.label ? o.label : "", o.label ? ": " : "", st.shapes_done, st.shapes_done == 1 ? "" : "s",
               st.shapes_failed, st.variants, st.measured, st.resumed, st.wrong, st.errors, st.winners,
               st.improved, st.interrupted ? " (interrupted: run again to resume)" : "");
    if (!cli->json && (rc != -1 || st.measured || st.resumed)) {
        char ph[512];
        tune_phases_str(&st.phases, ph, sizeof ph);
        printf("%s%stime: %.1f s (%.2f s a measurement): %s\n", o.label ? o.label : "", o.label ? ": " : "",
               st.phases.wall, st.measured ? st.phases.wall / (double)st.measured : 0.0, ph);
    }
    fflush(stdout);
    if (rc == TUNE_RC_BROKEN) {
        fprintf(stderr, "%s%s%.1023s; restarting the worker\n", o.label ? o.label : "", o.label ? ": " : "", err.msg);
        return TUNE_EXIT_RESTART;
    }
    if (rc)
        return cli_error("%.1023s", err.msg);
    if (st.interrupted)
        return 130;
    return err.st != KF_OK ? cli_error("%.1023s", err.msg) : 0;   /* shapes that could not be planned */
}

static pid_t spawn(cli_opts *cli, const int *devs, int nd, int w, gen_kvset *shapes, int n)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0)
        _exit(worker(cli, devs, nd, w, shapes, n));
    return pid;
}

/* Runs one worker process per device, restarting those whose CUDA context broke. */
static int run_workers(cli_opts *cli, const int *devs, int nd, gen_kvset *shapes, int n)
{
    pid_t pids[TUNE_MAX_DEVICES];
    int restarts[TUNE_MAX_DEVICES] = {0}, live = 0, rc = 0;
    for (int w = 0; w < nd; w++) {
        pids[w] = spawn(cli, devs, nd, w, shapes, n);
        if (pids[w] < 0)
            return cli_error("cannot start a worker for GPU %d: %s", devs[w], strerror(errno));
        live++;
    }
    while (live > 0) {
        int status;
        pid_t pid = waitpid(-1, &status, 0);
        if (pid < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        int w = 0;
        while (w < nd && pids[w] != pid)
            w++;
        if (w == nd)
            continue;
        int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (code == TUNE_EXIT_RESTART && !g_stop && restarts[w]++ < TUNE_MAX_RESTARTS) {
            pids[w] = spawn(cli, devs, nd, w, shapes, n);
            if (pids[w] > 0)
                continue;
            code = 1;
        }
        live--;
        if (code && !rc)
            rc = code == TUNE_EXIT_RESTART ? 1 : code;
    }
    return rc;
}

int cmd_tune(cli_opts *o)
{
    if (o->shape && o->sweep)
        return cli_usage_error("--shape and --sweep exclude each other");
    if (o->strategy && tune_strategy_parse(o->strategy) < 0)
        return cli_usage_error("--strategy wants random or halving, got '%s'", o->strategy);
    if (o->strategy && !o->budget)
        return cli_usage_error("--strategy needs --budget N");
    if (o->timing && tune_timing_parse(o->timing) < 0)
        return cli_usage_error("--timing wants sustained or burst, got '%s'", o->timing);
    int devs[TUNE_MAX_DEVICES], nd = 1;
    devs[0] = 0;
    core_err err = CORE_ERR_INIT;
    if (o->devices && (nd = tune_parse_devices(o->devices, devs, TUNE_MAX_DEVICES, &err)) < 0)
        return cli_usage_error("%.255s", err.msg);
    int si = 0, sn = 0;
    if (o->shard && tune_parse_shard(o->shard, &si, &sn, &err))
        return cli_usage_error("%.255s", err.msg);
    /* sweep files are named with '_' (the loader takes [A-Za-z0-9_]): llama3-8b is llama3_8b */
    static char sweep[64];
    if (o->sweep) {
        snprintf(sweep, sizeof sweep, "%s", o->sweep);
        for (char *c = sweep; *c; c++)
            *c = *c == '-' ? '_' : *c;
        o->sweep = sweep;
    }
    gen_kvset *shapes;
    int n = tune_shapes(o, si, sn, &shapes);
    if (n < 0)
        return 1;
    if (n == 0) {
        free(shapes);
        char fams[512];
        rt_family_list(1, fams, sizeof fams);   /* the registry's tuned families */
        return cli_error("no shapes of a tunable family (%s) in '%s'%s", fams,
                         o->shape ? "--shape" : o->sweep ? o->sweep : "default",
                         o->shard ? " for this shard" : "");
    }
    /* the parent never touches CUDA: the workers (forked) each own theirs */
    signal(SIGINT, on_sigint);
    signal(SIGTERM, on_sigint);
    int rc = run_workers(o, devs, nd, shapes, n);
    free(shapes);
    return rc;
}

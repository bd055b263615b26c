/* cli/cmd_bench.c: `kforge bench`: the peer-comparison harness (bench/run.sh of the source tree) with its options */
#include "cli/cli.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The harness: $KFORGE_BENCH, else bench/run.sh beside the folder of this executable (build/kforge in a
 * clone). Fills where[] with the places looked at; NULL when none holds it. */
static const char *find_harness(char *buf, size_t n, char *where, size_t wn)
{
    const char *env = getenv("KFORGE_BENCH");
    if (env && *env) {
        snprintf(where, wn, "%s ($KFORGE_BENCH)", env);
        snprintf(buf, n, "%s", env);
        return access(buf, X_OK) == 0 ? buf : NULL;
    }
    char exe[PATH_MAX - 32];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k <= 0) {
        snprintf(where, wn, "/proc/self/exe: %s", strerror(errno));
        return NULL;
    }
    exe[k] = 0;
    char *slash = strrchr(exe, '/');
    if (slash)
        *slash = 0;
    snprintf(buf, n, "%s/../bench/run.sh", exe);
    snprintf(where, wn, "%s", buf);
    char *real = realpath(buf, NULL);
    if (!real || access(real, X_OK)) {
        free(real);
        return NULL;
    }
    snprintf(buf, n, "%s", real);
    free(real);
    return buf;
}

int cmd_bench(cli_opts *o)
{
    char path[PATH_MAX], where[PATH_MAX + 64];
    if (!find_harness(path, sizeof path, where, sizeof where))
        return cli_error("the benchmark harness is not here: looked for %s; it lives in the source tree "
                         "(bench/run.sh: run 'kforge bench' from a build of a clone, or set KFORGE_BENCH)",
                         where);
    char *argv[66];
    int n = 0;
    argv[n++] = path;
    for (int i = 0; i < o->argc && n < 65; i++)
        argv[n++] = o->argv[i];
    argv[n] = NULL;
    cli_progress(o, "running %s\n", path);
    execv(path, argv);
    return cli_error("cannot run '%s': %s", path, strerror(errno));
}

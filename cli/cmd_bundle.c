/* cli/cmd_bundle.c: `kforge export` and `kforge import`: tuned bundles out of and into a database */
#include "cli/cli.h"
#include "db/bundle.h"

#include <stdio.h>
#include <stdlib.h>

#include "kf_rev.h"

int cmd_export(cli_opts *o)
{
    if (!o->gpu)
        return cli_usage_error("--gpu is required, e.g. --gpu \"NVIDIA H200\" (see 'kforge report')");
    if (!o->output)
        return cli_usage_error("-o FILE is required");
    db_store *db = cli_open_db(o, 0);
    if (!db)
        return 1;
    int nw = 0, nb = 0, rc = 0;
    if (db_bundle_export(db, o->gpu, o->family, o->output, KF_GIT_REV, &nw, &nb) != DB_OK)
        rc = cli_error("%s", db_errmsg(db));
    else if (o->json) {
        char jo[4096], jg[1024];
        printf("{\"bundle\":%s,\"gpu\":%s,\"winners\":%d,\"binaries\":%d}\n",
               gen_json_str(jo, sizeof jo, o->output), gen_json_str(jg, sizeof jg, o->gpu), nw, nb);
    } else
        printf("wrote %s: %d winner%s, %d binar%s for %s\n", o->output, nw, nw == 1 ? "" : "s", nb,
               nb == 1 ? "y" : "ies", o->gpu);
    db_close(db);
    return rc;
}

/* Every bundle named, in one transaction: any refusal imports none of them. */
int cmd_import(cli_opts *o)
{
    if (o->argc < 1)
        return cli_usage_error("which bundle? usage: kforge import FILE.kfb [FILE.kfb ...]");
    db_store *db = cli_open_db(o, 1);
    if (!db)
        return 1;
    int *nw = calloc((size_t)o->argc, sizeof *nw), *nb = calloc((size_t)o->argc, sizeof *nb), rc = 0;
    if (!nw || !nb)
        rc = cli_error("out of memory");
    else if (db_bundle_import(db, (const char *const *)o->argv, o->argc, nw, nb) != DB_OK)
        rc = cli_error("%s", db_errmsg(db));
    else
        for (int i = 0; i < o->argc; i++)
            printf("imported %s: %d winner%s, %d new binar%s\n", o->argv[i], nw[i], nw[i] == 1 ? "" : "s", nb[i],
                   nb[i] == 1 ? "y" : "ies");
    free(nw);
    free(nb);
    db_close(db);
    return rc;
}

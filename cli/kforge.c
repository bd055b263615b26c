/* cli/kforge.c: the kforge command: one table of subcommands, shared options, dispatch */
#include "cli/cli.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef KF_GIT_REV
#define KF_GIT_REV "unknown"
#endif

struct cli_cmd {
    const char *name;
    cli_fn fn;            /* NULL: reserved for a later release */
    const char *summary;
    const char *usage;    /* full --help text */
};

static const struct cli_cmd commands[] = {
    {"list", cmd_list, "families, their parameter spaces and variant counts",
     "usage: kforge list [FAMILY] [--sweep NAME] [--arch ARCH] [--json]\n"
     "  Lists the template families with their parameter spaces, the number of\n"
     "  variants in each space and how many are valid for each shape of the sweep\n"
     "  (default: the embedded 'default' sweep).\n"},
    {"gen", cmd_gen, "print the CUDA source of one variant, exactly as NVRTC sees it",
     "usage: kforge gen FAMILY --shape S [--params P] [--arch ARCH]\n"
     "  S: shape fields, e.g. \"dtype=bf16,b=1,sq=1,skv=128k,hq=32,hkv=8,d=128,causal=0\"\n"
     "  P: params (default: the template's default for the shape), e.g. \"bn=64,w=4\"\n"},
    {"compile", cmd_compile, "compile variants with NVRTC into the database's binary cache",
     "usage: kforge compile [FAMILY] [--shape S] [--params P | --all] [--sweep NAME]\n"
     "                      [--arch ARCH] [--ptx] [-j N] [--db PATH] [--json]\n"
     "  FAMILY --shape S [--params P]   one variant (default params: the template's default)\n"
     "  FAMILY --shape S --all          every valid variant of the family's space\n"
     "  [FAMILY] --sweep NAME [--all]   the default variant (or all) of every sweep shape\n"
     "  With no FAMILY, --shape or --sweep: --sweep default --all.\n"
     "  A binary already in the database (same cache key) is a cache hit, not recompiled.\n"},
    {"run", NULL, "run one variant on the GPU against the reference: error and time",
     "usage: kforge run FAMILY --shape S [--params P] [--db PATH]\n"
     "  Allocates random inputs on the GPU, runs the variant (default params: the\n"
     "  template's default), checks it against the CPU fp64 reference and prints the\n"
     "  relative error and the median time.\n"},
    {"db", cmd_db, "inspect or clean the database: info, ls, gc",
     "usage: kforge db info|ls|gc [--db PATH] [--json]\n"
     "  info   schema version, journal mode, row counts\n"
     "  ls     one line per binary: variant key, arch, size, registers, spills, compile ms\n"
     "  gc     delete binaries of template versions that are no longer current (and not winners)\n"},
    {"doctor", cmd_doctor, "NVRTC, driver and GPU, database, templates",
     "usage: kforge doctor [--db PATH] [--templates DIR] [--json]\n"
     "  Reports the NVRTC version, the CUDA driver and GPU if any, the database path\n"
     "  and schema version, the template folder, and whether every template loads.\n"},
    {"tune", NULL, "(reserved) time the variants of a sweep and keep the winners", ""},
    {"bench", NULL, "(reserved) compare against the peers", ""},
    {"export", NULL, "(reserved) write a tuned bundle for one GPU model", ""},
    {"import", NULL, "(reserved) merge a bundle into a database", ""},
    {"report", NULL, "(reserved) winners per family and GPU", ""},
};
#define N_COMMANDS (int)(sizeof commands / sizeof commands[0])

static const char common_help[] =
    "common options:\n"
    "  --db PATH          database (default $KFORGE_DB or ./kforge.db)\n"
    "  --arch ARCH        target: sm_90a, sm_90, sm_80, ... (default: the GPU's, else sm_90a)\n"
    "  --templates DIR    read templates from DIR instead of the embedded copy\n"
    "                     (also $KFORGE_TEMPLATE_DIR)\n"
    "  -j N               compile threads (default: the number of cores)\n"
    "  --json             machine-readable output\n"
    "  --quiet            no progress on stderr\n"
    "  -h, --help         this help\n";

static void main_help(FILE *f)
{
    fprintf(f, "usage: kforge [--version] <command> [options]\n\n"
               "kforge generates, compiles, tunes and serves specialised attention kernels.\n\n"
               "commands:\n");
    for (int i = 0; i < N_COMMANDS; i++)
        fprintf(f, "  %-9s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n%s\nRun 'kforge <command> --help' for a command's own options.\n", common_help);
}

static int parse(int argc, char **argv, cli_opts *o)
{
    enum { O_DB = 256, O_ARCH, O_TEMPLATES, O_SHAPE, O_PARAMS, O_SWEEP, O_JSON, O_QUIET, O_PTX,
           O_ALL, O_MEASURE };
    static const struct option longopts[] = {
        {"db", required_argument, 0, O_DB},           {"arch", required_argument, 0, O_ARCH},
        {"templates", required_argument, 0, O_TEMPLATES}, {"shape", required_argument, 0, O_SHAPE},
        {"params", required_argument, 0, O_PARAMS},   {"sweep", required_argument, 0, O_SWEEP},
        {"json", no_argument, 0, O_JSON},             {"quiet", no_argument, 0, O_QUIET},
        {"ptx", no_argument, 0, O_PTX},               {"all", no_argument, 0, O_ALL},
        {"measure", no_argument, 0, O_MEASURE},       {"help", no_argument, 0, 'h'},
        {"jobs", required_argument, 0, 'j'},          {0, 0, 0, 0}};
    optind = 1;
    opterr = 0;
    for (;;) {
        int c = getopt_long(argc, argv, "+hj:", longopts, NULL);
        if (c == -1) {
            /* options and positional arguments may come in any order */
            if (optind >= argc)
                break;
            if (o->argc >= 64)
                return cli_usage_error("too many arguments");
            o->argv[o->argc++] = argv[optind++];
            continue;
        }
        switch (c) {
        case O_DB: o->db_path = optarg; break;
        case O_ARCH: o->arch = optarg; break;
        case O_TEMPLATES: o->templates = optarg; break;
        case O_SHAPE: o->shape = optarg; break;
        case O_PARAMS: o->params = optarg; break;
        case O_SWEEP: o->sweep = optarg; break;
        case O_JSON: o->json = 1; break;
        case O_QUIET: o->quiet = 1; break;
        case O_PTX: o->ptx = 1; break;
        case O_ALL: o->all = 1; break;
        case O_MEASURE: o->measure = 1; break;
        case 'h': o->help = 1; break;
        case 'j': {
            char *end;
            long v = strtol(optarg, &end, 10);
            if (*end || v < 1 || v > 256)
                return cli_usage_error("-j wants a number of threads from 1 to 256, got '%s'", optarg);
            o->jobs = (int)v;
            break;
        }
        case ':':
            return cli_usage_error("option '%s' needs a value", argv[optind - 1]);
        default:
            return cli_usage_error("unknown option '%s'", argv[optind - 1]);
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        main_help(stderr);
        return EXIT_USAGE;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        main_help(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
        printf("kforge %s (%s)\n", "0.1.0", KF_GIT_REV);
        return 0;
    }
    const struct cli_cmd *cmd = NULL;
    for (int i = 0; i < N_COMMANDS; i++)
        if (!strcmp(argv[1], commands[i].name))
            cmd = &commands[i];
    if (!cmd)
        return cli_usage_error("unknown command '%s' (see 'kforge --help')", argv[1]);
    if (!cmd->fn)
        return cli_error("'kforge %s' is reserved and not built yet", cmd->name);
    cli_opts o = {0};
    char *pos[64];
    o.argv = pos;
    int rc = parse(argc - 1, argv + 1, &o);
    if (rc)
        return rc;
    if (o.help) {
        printf("%s\n%s", cmd->usage, common_help);
        return 0;
    }
    return cmd->fn(&o);
}

/* tests/mutants/spawn.h: the mutant drivers' shared parts: run one mutant in its own process, name the verdict of its exit */
#ifndef KF_TESTS_MUTANTS_SPAWN_H
#define KF_TESTS_MUTANTS_SPAWN_H

/* Flushes stdout and stderr, then runs exe with the arguments a1 and a2 (NULL ends the list early) in
 * a child process, with the environment variable env set to val (env NULL: nothing set). Returns its
 * wait status; 3 << 8 (exit code 3, a set-up error) when it could not be started or waited for. */
int mut_spawn(const char *exe, const char *a1, const char *a2, const char *env, const char *val);

/* The verdict of a mutant child's wait status (exit codes: 0 every case passed, 1 some case failed,
 * 3 set-up error, 4 not planted): "NOT PLANTED", or a planted mutant (++*planted) that is "killed",
 * "killed (the run crashed)" (a signal; ++*killed for both), "SURVIVED" or "ERROR (set-up failed)".
 * Any other exit code is a set-up error too, unless other_kills: then "killed (the run failed)". */
const char *mut_verdict(int status, int other_kills, int *planted, int *killed);

#endif

/* tests/mutants/spawn.c: the mutant drivers' shared parts: run one mutant in its own process, name the verdict of its exit */
#include "tests/mutants/spawn.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

int mut_spawn(const char *exe, const char *a1, const char *a2, const char *env, const char *val)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        if (env)
            setenv(env, val, 1);
        execl(exe, exe, a1, a2, (char *)NULL);
        _exit(3);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) < 0)
        return 3 << 8;
    return st;
}

const char *mut_verdict(int st, int other_kills, int *planted, int *killed)
{
    if (WIFEXITED(st) && WEXITSTATUS(st) == 4)
        return "NOT PLANTED";
    ++*planted;
    if (WIFSIGNALED(st))
        return ++*killed, "killed (the run crashed)";
    if (WEXITSTATUS(st) == 1)
        return ++*killed, "killed";
    if (WEXITSTATUS(st) == 0)
        return "SURVIVED";
    if (WEXITSTATUS(st) == 3 || !other_kills)
        return "ERROR (set-up failed)";
    return ++*killed, "killed (the run failed)";   /* a CUDA error inside the run: the mutant broke the kernel */
}

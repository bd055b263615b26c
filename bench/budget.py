"""The harness's time budget: whether a run starts its next shape."""


def stop_reason(elapsed, longest, budget):
    """Why the next shape must not start, or None.

    elapsed: seconds since the run started; longest: the longest shape so far in seconds (0 before the first);
    budget: the --time-budget in seconds (0: none). A shape starts only when the time left covers the longest shape
    so far, so that a run cut by an outer timeout (a device call's limit) loses no shape half-way: a shape's first
    contenders can compile for a minute (fla's Triton kernels on a fresh machine) and the budget was once checked
    only at the start of a shape, which let the last one run ~70 s past it and be killed (bench/RESULTS.md,
    session 31's call 2)."""
    if not budget:
        return None
    if elapsed > budget:
        return f"time budget {budget:.0f} s spent"
    if elapsed + longest > budget:
        return (f"{budget - elapsed:.0f} s of the {budget:.0f} s time budget left, less than the longest shape so far "
                f"({longest:.0f} s)")
    return None

# SPDX-License-Identifier: GPL-2.0
#
# Medians with min-max spreads, as the benchmark reports print them
# (scripts/pingbench, scripts/kvmbench): a difference is decided ("apart")
# only when the two runs' min-max spreads do not overlap.

import statistics


def apart(a, b):
    """Whether the min-max spreads of the runs a and b do not overlap."""
    return max(a) < min(b) or max(b) < min(a)


def cell(v, fmt):
    """'median [min-max]' of the runs v, each number through fmt; one run
    alone without brackets, none as '-'."""
    if not v:
        return "-"
    if len(v) == 1:
        return fmt(v[0])
    return f"{fmt(statistics.median(v))} [{fmt(min(v))}-{fmt(max(v))}]"

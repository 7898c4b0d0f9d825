# Licensed under the Apache License, Version 2.0 (the "License"); you may
# not use this file except in compliance with the License. You may obtain
# a copy of the License at
#
#      http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
# WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
# License for the specific language governing permissions and limitations
# under the License.
"""Shared helpers of the benchmarks: timing, memory, machine, tables."""

from __future__ import annotations

import collections.abc
import dataclasses
import os
import platform
import random
import statistics
import time
import tracemalloc
from typing import Any
import uuid


def random_uuids(n: int, seed: int = 2016) -> list[str]:
    rng = random.Random(seed)
    return [str(uuid.UUID(int=rng.getrandbits(128), version=4))
            for _ in range(n)]


@dataclasses.dataclass
class Timing:
    wall: float
    cpu: float
    peak_bytes: int
    value: Any


def measure(fn: collections.abc.Callable[[], Any],
            trace_memory: bool = True) -> Timing:
    """Run ``fn`` once: wall and CPU seconds, peak traced allocation."""
    if trace_memory:
        tracemalloc.start()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    value = fn()
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    peak = 0
    if trace_memory:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return Timing(wall, cpu, peak, value)


def median_of(fn: collections.abc.Callable[[], Any], repeat: int) -> Timing:
    """Median wall and CPU of ``repeat`` untraced runs, memory of one more.

    Tracing allocations slows allocation-heavy code (tooz's ring about
    three times), so no timed run is traced: the peak memory comes from an
    extra, traced run. The value is the first run's.
    """
    runs = [measure(fn, trace_memory=False) for _ in range(repeat)]
    traced = measure(fn, trace_memory=True)
    return Timing(statistics.median(r.wall for r in runs),
                  statistics.median(r.cpu for r in runs),
                  traced.peak_bytes, runs[0].value)


def machine() -> str:
    mem = ''
    try:
        with open('/proc/meminfo') as f:
            kb = int(f.readline().split()[1])
        mem = ', %.0f GiB RAM' % (kb / 2 ** 20)
    except OSError:
        pass
    cpu = platform.processor() or platform.machine()
    try:
        with open('/proc/cpuinfo') as f:
            for line in f:
                if line.startswith('model name'):
                    cpu = line.split(':', 1)[1].strip()
                    break
    except OSError:
        pass
    return '%s, %d cores%s, Python %s' % (cpu, os.cpu_count() or 0, mem,
                                           platform.python_version())


def table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(headers)]
    line = '  '.join('%-*s' % (w, h)
                     for w, h in zip(widths, headers, strict=True))
    out = [line, '  '.join('-' * w for w in widths)]
    for r in rows:
        out.append('  '.join('%*s' % (w, c)
                             for w, c in zip(widths, r, strict=True)))
    return '\n'.join(out)


def process_group_cpu(pgid: int) -> float:
    """CPU seconds (user + system) used so far by a process group.

    Reads ``/proc`` (Linux); NaN elsewhere. Processes that have exited are
    not counted, so call it around work done by long-lived processes.
    """
    tick = os.sysconf('SC_CLK_TCK')
    total = 0
    try:
        entries = os.listdir('/proc')
    except OSError:
        return float('nan')
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open('/proc/%s/stat' % entry) as f:
                # The command name, in brackets, may contain spaces.
                fields = f.read().rsplit(')', 1)[1].split()
        except (OSError, IndexError):
            continue
        # After the name: state, ppid, pgrp, ... utime (12th), stime.
        if int(fields[2]) == pgid:
            total += int(fields[11]) + int(fields[12])
    return total / tick

"""What a benchmark ran on, for the caption of the table it prints (--markdown)."""

import datetime
import os
import platform

import torch


def describe(threads: int) -> str:
    """'Measured <date> UTC on <cores> cores (<processor>), <threads> threads, torch <version>'."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    today = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return f"Measured {today} on {os.cpu_count()} cores ({cpu}), {threads} threads, torch {torch.__version__}"

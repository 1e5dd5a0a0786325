"""Run one benchmark case in a fresh process, so its time and peak memory are its own."""

import multiprocessing as mp


def run_in_fresh_process(target, *args):
    """Call target(*args, queue) in a spawned process and return what it put on the queue."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    process = ctx.Process(target=target, args=(*args, queue))
    process.start()
    result = queue.get()
    process.join()
    return result

"""Jobs for the parse worker's tests. Its worker process imports this module, so it imports little."""

from __future__ import annotations

import os
import signal
import time

from docsum_parser.extract import ExtractedText, ParseError
from docsum_parser.worker import Job, run_job


def misbehave(job: Job) -> ExtractedText:
    """Runs in the worker: the file name says what to do."""
    if job.filename == "slow.txt":
        time.sleep(60)
    elif job.filename == "hungry.txt":
        bytearray(2**30)  # twice the limit
    elif job.filename == "greedy.txt":
        # Small pieces until the address space runs out, then a library's own complaint. Zeroed pieces: the
        # kernel maps them untouched, so reaching the limit costs no CPU (filling 512 MiB took seconds on a
        # busy machine, past the worker's time limit).
        hoard = []
        try:
            while True:
                hoard.append(bytes(2**20))
        except MemoryError:
            del hoard
            raise ParseError("DOCX is not a valid Word document (unknown error)", "invalid_docx") from None
    elif job.filename == "fatal.txt":
        os.kill(os.getpid(), signal.SIGKILL)
    elif job.filename == "buggy.txt":
        raise KeyError("a bug")
    return run_job(job)

"""Documents are parsed in a worker process, under a wall-clock and a memory limit.

A pathological file (a decompression bomb, a page tree that takes minutes to walk, a library that
loops) costs at most `parse_timeout_s` seconds and `parse_memory_bytes` of address space (RLIMIT_AS in
the worker), and fails its document alone: the worker is killed and replaced, the consumer goes on, and
the parser's own memory never holds more than the bytes in and the text out. One worker, started with
the service and kept warm between documents (stopped after `idle_s` without one, so an idle parser
holds none; the next document starts another), takes one document at a time; it retires (and is
replaced) after a document that left it holding much more memory than it started with, so that memory
goes back to the system.

`run_job` is the extraction itself; `ParseWorker` runs it in the worker. Both take a `Job` and return
the `ExtractedText` or raise `ParseError`, so the handler's Deps can hold either.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import logging
import math
import multiprocessing
import os
import resource
import signal
import subprocess
import sys
import threading
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection
from typing import Any

from docsum_shared.positions import Positions

from . import logfilter
from .extract import ExtractedText, extract_text
from .limits import Limits, OcrConfig, size_label
from .parse_error import ParseError

log = logging.getLogger("docsum_parser.worker")

# A worker holding this much more resident memory after a document than when it was ready retires.
RETIRE_GROWTH_BYTES = 128 * 2**20
# A failure with the worker's address space past this share of its limit counts as running out of memory.
NEAR_LIMIT = 0.9
# How long a new worker may take to import its libraries and say it is ready.
START_TIMEOUT_S = 60.0
_RETRY = "re-export it (or split it into smaller files) and try again"


@dataclass(frozen=True)
class Job:
    data: bytes
    filename: str
    content_type: str | None
    limits: Limits
    document: str  # the document id, for log lines
    ocr: OcrConfig = OcrConfig()
    # The OCR'd text of a PDF's scanned pages (by page, from 0), read in place of their text layer.
    ocr_texts: Mapping[int, str] = field(default_factory=dict)
    # A scanned page (from 0) to read by OCR, alone: its text is the job's (positions, format: none meant).
    ocr_page: int | None = None


def run_job(job: Job) -> ExtractedText:
    """Extract the job's text in this process (or OCR its one page), with the libraries' warnings collapsed."""
    logfilter.install()
    with logfilter.one_document(job.document):
        if job.ocr_page is not None:
            from .ocr import read_page

            return ExtractedText(read_page(job.data, job.ocr_page, job.ocr), "pdf", Positions("page", (0,)))
        return extract_text(job.data, job.filename, job.content_type, job.limits, job.ocr_texts)


class WorkerClosed(RuntimeError):
    """The parser is shutting down: the document is handed back, not failed."""


class ParseWorker:
    """Runs `run` (default `run_job`) in one warm worker process; thread-safe, one job at a time."""

    def __init__(
        self,
        *,
        timeout_s: float,
        memory_bytes: int,
        idle_s: float = 0.0,
        run: Callable[[Job], ExtractedText] = run_job,
    ) -> None:
        self.timeout_s = timeout_s
        self.memory_bytes = memory_bytes
        self.idle_s = idle_s  # stop the worker after this long without a job (0: keep it)
        self._jobs = 0  # jobs taken so far: a retirement scheduled before the latest one is void
        self._retirement: threading.Timer | None = None
        self._run = run
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._conn: Connection | None = None
        self._ready = False
        self._closed = False

    def start(self) -> None:
        """Start the worker now rather than with the first document (which then pays nothing for its
        start: a new interpreter and its imports, ~0.1 s); without a document for `idle_s` it stops."""
        with self._lock:
            if self._process is None:
                self._spawn()
        self._retire_when_idle()

    def __call__(self, job: Job) -> ExtractedText:
        try:
            return self._call(job)
        finally:
            self._retire_when_idle()

    def _call(self, job: Job) -> ExtractedText:
        with self._lock:
            self._jobs += 1
            _give_back_free_memory()  # what the documents before left in malloc's free lists
            conn = self._send(job)
            if not conn.poll(self.timeout_s):
                self._replace()
                raise ParseError(
                    f"reading the file took longer than the limit of {self.timeout_s:g} s "
                    f"(DOCSUM_PARSE_TIMEOUT_S); {_RETRY}",
                    "timeout",
                )
            try:
                reply = conn.recv()
            except (EOFError, OSError):
                how = self._replace(wait_s=5.0)
                raise ParseError(
                    f"the parser's worker stopped while reading the file ({how}); the file may need more "
                    f"memory than the limit of {size_label(self.memory_bytes)} (DOCSUM_PARSE_MEMORY_BYTES); "
                    f"{_RETRY}",
                    "worker_stopped",
                ) from None
            status, value, retire = reply
            if retire:
                self._replace(wait_s=5.0)
        if status == "ok":
            assert isinstance(value, ExtractedText)
            return value
        if status == "failed":
            message, kind = value
            raise ParseError(message, kind)
        if status == "memory":
            raise ParseError(
                f"reading the file needed more memory than the limit of {size_label(self.memory_bytes)} "
                f"(DOCSUM_PARSE_MEMORY_BYTES); {_RETRY}",
                "out_of_memory",
            )
        raise RuntimeError(f"the parser's worker failed: {value}")  # a bug: retried, then dead-lettered

    def close(self) -> None:
        """Stop the worker; a job in flight ends with WorkerClosed. Safe to call from any thread."""
        self._closed = True
        if self._retirement is not None:
            self._retirement.cancel()
        process = self._process
        if process is not None and process.poll() is None:
            process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(5.0)

    def _retire_when_idle(self) -> None:
        if self.idle_s <= 0 or self._closed:
            return
        with self._lock:
            if self._retirement is not None:
                self._retirement.cancel()
            self._retirement = threading.Timer(self.idle_s, self._retire, args=(self._jobs,))
            self._retirement.daemon = True
            self._retirement.start()

    def _retire(self, jobs: int) -> None:
        """No job since the one numbered `jobs`: stop the worker; the next job starts another."""
        with self._lock:
            if jobs != self._jobs or self._process is None or self._closed:
                return
            log.info("parse worker %s: no document for %.0f s", self._process.pid, self.idle_s)
            self._stop(wait_s=5.0)

    # --- the worker process's lifecycle (under the lock) -------------------------------------------

    def _send(self, job: Job) -> Connection:
        """Hand the job to a ready worker: a dead one (killed between documents) is replaced first."""
        for attempt in (1, 2):
            if self._closed:
                raise WorkerClosed("the parser is stopping")
            if self._process is None or self._process.poll() is not None:
                self._replace()
            conn = self._wait_ready()
            try:
                conn.send(replace(job, data=b""))
                conn.send_bytes(job.data)  # as it is: no pickled copy of the file on this side
                return conn
            except (BrokenPipeError, ConnectionError, EOFError) as exc:
                if attempt == 2:
                    raise RuntimeError(f"the parser's worker takes no work: {exc}") from exc
                self._replace()
        raise AssertionError("unreachable")

    def _spawn(self) -> None:
        # A new interpreter (a process running threads is never forked) that imports this module only,
        # and no multiprocessing start method: theirs also keep a resource tracker, an interpreter of
        # its own (~12 MB) for the parser's lifetime, for semaphores and shared memory it never makes.
        parent, child = multiprocessing.Pipe()
        process = subprocess.Popen(
            [sys.executable, "-P", "-c", f"from {__name__} import _main; _main({child.fileno()})"],
            pass_fds=(child.fileno(),),
            stdin=subprocess.DEVNULL,
        )
        child.close()
        try:  # where to import `run` from, as here, then what to serve
            parent.send(sys.path)
            parent.send((self.memory_bytes, self.timeout_s, self._run))
        except OSError:
            pass  # it died at once: found dead at the first job, and replaced
        self._process, self._conn, self._ready = process, parent, False
        log.info("parse worker %s started", process.pid)

    def _wait_ready(self) -> Connection:
        assert self._conn is not None
        if not self._ready:
            try:
                if not self._conn.poll(START_TIMEOUT_S):
                    raise RuntimeError(f"the parser's worker was not ready after {START_TIMEOUT_S:g} s")
                self._conn.recv()  # ("ready", pid)
            except (EOFError, OSError) as exc:
                raise RuntimeError(f"the parser's worker did not start: {exc}") from exc
            self._ready = True
        return self._conn

    def _stop(self, wait_s: float = 0.0) -> str:
        """Close its pipe (a worker waiting for a job reads the end of it and exits), wait `wait_s` for
        it to exit by itself, then kill it; returns how it ended."""
        how = "not running"
        if self._conn is not None:
            self._conn.close()
        if self._process is not None:
            try:
                self._process.wait(wait_s)
                how = _exit_description(self._process.returncode)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
                how = "killed"
            log.info("parse worker %s stopped (%s)", self._process.pid, how)
        self._process = self._conn = None
        return how

    def _replace(self, wait_s: float = 0.0) -> str:
        """Stop the worker (see `_stop`) and start another; returns how the old one ended."""
        how = self._stop(wait_s)
        if self._closed:
            raise WorkerClosed("the parser is stopping")
        self._spawn()
        return how


_malloc_trim: Callable[[int], int] | None
try:
    _malloc_trim = ctypes.CDLL("libc.so.6").malloc_trim
except (OSError, AttributeError):  # not glibc
    _malloc_trim = None


def _give_back_free_memory() -> None:
    """Return free heap memory to the system: glibc keeps what big buffers (a file's bytes, a document's
    text) leave behind in its arenas, one per thread, so the parser would stay at its high-water mark."""
    if _malloc_trim is not None:
        _malloc_trim(0)


def _exit_description(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


# --- inside the worker ---------------------------------------------------------------------------


def _main(fd: int) -> None:
    """The worker process: its end of the pipe is `fd`; the parser sends its import path, then what
    `_serve` takes."""
    conn = Connection(fd)
    try:
        sys.path[:] = conn.recv()
        memory_bytes, timeout_s, run = conn.recv()
    except (EOFError, OSError):
        return  # the parser is gone
    _serve(conn, memory_bytes, timeout_s, run)


def _serve(conn: Connection, memory_bytes: int, timeout_s: float, run: Callable[[Job], ExtractedText]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the parser, which stops us
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s[worker %(process)d]: %(message)s"
    )
    logfilter.install()
    _limit(resource.RLIMIT_AS, memory_bytes)
    baseline = _resident_bytes()
    gc.freeze()  # what lives now lives on: the collection after each job skips it (below)
    conn.send(("ready", os.getpid()))
    while True:
        try:
            job = conn.recv()
            job = replace(job, data=conn.recv_bytes())
        except (EOFError, OSError):
            return  # the parser is gone
        # Should the parser die mid-job, no job may spin on: the CPU limit ends it a little after the
        # wall-clock limit would have (SIGXCPU).
        _limit(resource.RLIMIT_CPU, math.ceil(_cpu_seconds() + timeout_s + 5))
        peak_before = _peak_address_space()
        reply: tuple[str, Any]
        try:
            reply = ("ok", run(job))
        except ParseError as exc:
            reply = ("failed", (str(exc), exc.kind))
        except MemoryError:
            reply = ("memory", None)
        except Exception as exc:
            reply = ("error", "".join(traceback.format_exception_only(exc)).strip())
        # A library that runs out of memory may say something else (libxml2: "unknown error"): a failure
        # with the address space grown to the limit during the job is the limit's doing.
        peak = _peak_address_space()
        if reply[0] in ("failed", "error") and peak > peak_before and peak > NEAR_LIMIT * memory_bytes:
            reply = ("memory", None)
        del job
        # The job's cycles go now, not at some later job's turn. Only what came since the last freeze is
        # looked at: a full pass over the libraries' own objects (pypdf, lxml, python-docx, imported by
        # the first job that needs them) took ~30 ms a job.
        gc.collect()
        gc.freeze()
        retire = reply[0] == "memory" or _resident_bytes() > baseline + RETIRE_GROWTH_BYTES
        try:
            conn.send((*reply, retire))
        except MemoryError:
            conn.send(("memory", None, True))
            return
        if retire:
            return


def _limit(which: int, soft: int) -> None:
    _, hard = resource.getrlimit(which)
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(which, (soft, hard))


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _peak_address_space() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmPeak:"):
                return int(line.split()[1]) * 1024
    return 0


def _resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

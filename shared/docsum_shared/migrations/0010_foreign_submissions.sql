-- Documents other systems publish straight onto document-submitted (inline or by URI): their task is
-- created on first sight with the number of documents it will have, and finishes only once that many
-- exist and are final (NULL, as for the gateway's tasks: the documents already present).
ALTER TABLE tasks ADD COLUMN expected_documents int CHECK (expected_documents > 0);
-- Such a document that could not be read (bad base64, a URI refused or unreachable) is stored FAILED
-- with its error and no bytes, so that its submitter sees why.
ALTER TABLE documents ALTER COLUMN blob_sha256 DROP NOT NULL;
ALTER TABLE documents ALTER COLUMN size_bytes DROP NOT NULL;

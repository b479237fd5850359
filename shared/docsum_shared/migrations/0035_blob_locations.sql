-- Document bytes may live in S3-compatible object storage (DOCSUM_BLOB_STORE=s3://bucket/prefix): the row
-- then keeps the object's location (s3://bucket/key) instead of the bytes. Rows written before keep theirs.
ALTER TABLE blobs ALTER COLUMN data DROP NOT NULL;
ALTER TABLE blobs ADD COLUMN IF NOT EXISTS location text;
ALTER TABLE blobs DROP CONSTRAINT IF EXISTS blobs_bytes_or_location;
ALTER TABLE blobs ADD CONSTRAINT blobs_bytes_or_location CHECK ((data IS NULL) <> (location IS NULL));

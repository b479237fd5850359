"""The progress recorder: a Kafka consumer group that appends the pipeline's steps to the progress log."""

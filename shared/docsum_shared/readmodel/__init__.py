"""The read side: tasks as their owners see them (the gateway) and as the pipeline publishes them."""

"""In-memory stand-ins for the ports a handler is given: the LLM port (llm.py) and each service's
repository (one module per service). tests/repositories/ proves each repository fake keeps the rules of
its PostgreSQL repository."""

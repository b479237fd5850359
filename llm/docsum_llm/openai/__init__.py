"""The client of any OpenAI-compatible chat-completions endpoint: the backend (client.py), the HTTP
transport it speaks through, the endpoint's learned input budget, the prompts, and how the model is asked
to cite its sources and its answers read."""

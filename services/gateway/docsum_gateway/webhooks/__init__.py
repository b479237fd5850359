"""Webhooks: the endpoints owners register (routers/webhooks.py), their SQL (repository.py), the decisions
(policy.py) and the loop that sends the outbox's deliveries, signed by Standard Webhooks (delivery.py)."""

"""The pipeline as one object: each service's stage (stage.py), and the plan that lists them (plan.py)."""

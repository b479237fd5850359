"""The pipeline as one object: the plan of its stages (plan.py), and the runner that runs them all in one
process (inprocess.py)."""

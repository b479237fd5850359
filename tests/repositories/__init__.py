"""One contract per service's repository, run against its fake (tests/unit) and against PostgreSQL
(tests/integration)."""

"""Fault-injection scenarios: real kiqbeat processes against real redis-server processes."""

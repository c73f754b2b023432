"""Unit tests of the pure core: no Redis, no clock, no fixtures."""

"""Interoperability tests with official NSQ clients (pynsq)."""

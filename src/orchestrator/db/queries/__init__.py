"""Queries, one module per aggregate; each function takes an open connection."""

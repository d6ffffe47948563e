"""Scraper orchestrator: coordinates scraper runs end to end on the Apify platform."""

__version__ = "0.1.0"

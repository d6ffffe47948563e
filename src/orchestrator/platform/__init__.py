"""The scrape platform behind a small interface (:class:`port.Platform`).

Activities depend on the interface; :mod:`apify` implements it on the official
``apify-client``; tests may pass a fake.
"""

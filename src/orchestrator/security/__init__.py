"""Pure security primitives of the API: API key format and hashing, callback secret derivation.

No I/O, no clock, no logging: each module here can be audited and tested on its own.
"""
